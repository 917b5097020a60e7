"""Serializers of the neutral service model (generator/services): compose.py writes compose
projects. A Kubernetes export would be a sibling module. Pure: data in, text out."""
