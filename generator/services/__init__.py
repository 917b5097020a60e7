"""The neutral service model between the plan and its serializers: model.py (what runs:
image, command, env, ports, devices, health, dependencies, volumes, files, per host) and
build.py (Plan -> Deployment). Nothing here is shaped like compose.

Import the modules themselves: this package imports nothing, because the topology and router
units build parts of the model and build.py consults them.
"""
