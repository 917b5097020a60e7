"""The neutral service model between the plan and its serializers (model.py). Nothing here
is shaped like compose.

Import the modules themselves: this package imports nothing, because the topology and router
units build parts of the model.
"""
