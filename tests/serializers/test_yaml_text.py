"""dump_yaml writes every string so that docker compose (a YAML 1.2 reader) reads a string
back: strings PyYAML (YAML 1.1) would leave bare and compose takes for a number, a bool, a
null or a date are quoted. Checked with the real `docker compose config`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from generator.serializers.yaml_text import dump_yaml
from tests.tools import compose_cli

# Each is a number, bool, null or date to YAML 1.2; PyYAML's own dump leaves the first four bare.
TRICKY = [
    "09", "0o7", "1e5", "2024-1-2", "0:9", "0x1F", "-0.5e-3", ".inf", "-.Inf", ".nan",
    "null", "~", "true", "False", "1_000", "+1", "0b1", "12", "2024-01-02T03:04:05",
]  # fmt: skip


def test_pyyamls_own_dump_is_what_compose_misreads(tmp_path: Path) -> None:
    """The reason dump_yaml exists: this test fails if PyYAML ever quotes these itself."""
    assert "- 09\n" in yaml.safe_dump(TRICKY)
    assert "- 1e5\n" in yaml.safe_dump(TRICKY)


def test_compose_reads_every_string_back_as_the_same_string(tmp_path: Path) -> None:
    document = {
        "name": "xpyd-yaml12",
        "services": {"s": {"image": "debian:bookworm-slim", "command": TRICKY}},
    }
    path = tmp_path / "compose.yaml"
    path.write_text(dump_yaml(document), encoding="utf-8")
    result = subprocess.run(
        [*compose_cli(), "-f", str(path), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["services"]["s"]["command"] == TRICKY
