"""What runs a stack's services on one host, behind one protocol (``base.ServiceRuntime``):
Docker Compose (generator/docker/compose.py's ``ComposeStack``) or local processes
(``process.ProcessStack``). The workflow, probes and CLI talk to the protocol; Slurm or
Kubernetes runtimes would be siblings reading the same neutral service model."""

from generator.runtimes.base import OneOffRun, ServiceRuntime, ServiceState

__all__ = ["OneOffRun", "ServiceRuntime", "ServiceState"]
