"""The link cut's nft rules, loaded for real by this machine's nft into a throwaway network
namespace (`unshare -n`: nothing of this machine's own firewall is touched): what they drop,
that a second cut replaces the first, and that the restore leaves nothing behind, twice."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from generator.docker.netcut import TABLE, cut_ruleset, resolved, restore_ruleset


def in_fresh_netns(*rulesets: str) -> str:
    """Loads ``rulesets`` one after another into a new network namespace; its ruleset after."""
    loads = [f"nft '{ruleset}'" for ruleset in rulesets]
    script = " && ".join([*loads, "nft list ruleset"])
    done = subprocess.run(
        ["unshare", "-n", "sh", "-c", script], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


pytestmark = pytest.mark.skipif(
    shutil.which("nft") is None or shutil.which("unshare") is None,
    reason="needs nft and unshare (.ci/setup's Docker engine brings nft)",
)


def test_a_cut_drops_both_families_before_connection_tracking() -> None:
    ruleset = in_fresh_netns(cut_ruleset(["10.231.0.3", "fd00::3", "10.231.0.4"]))
    assert f"table inet {TABLE}" in ruleset
    assert "type filter hook input priority raw; policy accept;" in ruleset
    assert "ip saddr { 10.231.0.3, 10.231.0.4 } drop" in ruleset
    assert "ip6 saddr fd00::3 drop" in ruleset


def test_a_second_cut_replaces_the_first() -> None:
    ruleset = in_fresh_netns(cut_ruleset(["10.231.0.3"]), cut_ruleset(["10.231.0.9"]))
    assert "10.231.0.9" in ruleset
    assert "10.231.0.3" not in ruleset


def test_restoring_leaves_nothing_and_can_be_repeated() -> None:
    assert in_fresh_netns(cut_ruleset(["10.231.0.3"]), restore_ruleset(), restore_ruleset()) == ""
    assert in_fresh_netns(restore_ruleset()) == ""  # no cut at all: nothing to undo, no error


def test_addresses_are_matched_as_ips() -> None:
    assert resolved("10.231.0.3") == ["10.231.0.3"]
    assert "127.0.0.1" in resolved("localhost")
