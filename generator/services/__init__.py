"""The neutral service model between the plan and its serializers: model.py (Service,
HostServices, Deployment), built from the plan by build.py from one function per kind of
service (parts.py: engines, LMCache servers, router, bench; commands.py and bench.py give their
command lines). Nothing here is shaped like compose (generator/serializers/compose.py is).

Import the modules themselves: this package imports nothing, because the topology and router
units build parts of the model (config files) while parts.py asks them for engine settings.
"""
