"""The P/D proxy: the router of lmcache-pd stacks (and an alternative for nixl-mp).

Runs alone in the router image: it imports nothing from the workflow or Docker modules."""
