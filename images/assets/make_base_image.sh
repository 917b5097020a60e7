#!/usr/bin/env bash
# Build a local stand-in for the public `debian:bookworm-slim` image (no registry here).
# Idempotent: does nothing when the tag already exists. Needs root, debootstrap, docker.
set -euo pipefail

TAG="${BASE_IMAGE_TAG:-debian:bookworm-slim}"
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SECURITY_MIRROR="${SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

if docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "image $TAG exists, skipping" >&2
    exit 0
fi

ROOTFS="$(mktemp -d /tmp/rootfs.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR"

# Same apt sources as the official image (deb822), incl. updates and security.
rm -f "$ROOTFS/etc/apt/sources.list"
cat >"$ROOTFS/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF

# Slim like the official image: no docs/man/locales from later apt installs, no apt caches.
cat >"$ROOTFS/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
cat >"$ROOTFS/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$ROOTFS/etc/apt/apt.conf.d/docker-no-languages"
echo 'APT::Install-Recommends "false";' >"$ROOTFS/etc/apt/apt.conf.d/docker-no-recommends"

rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
    "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/usr/share/doc/* \
    "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/var/log/*.log \
    "$ROOTFS"/var/log/apt/* "$ROOTFS"/tmp/*
: >"$ROOTFS/etc/machine-id"

tar --numeric-owner -C "$ROOTFS" -c . | docker import \
    --change 'CMD ["bash"]' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --message "debootstrap --variant=minbase $SUITE $MIRROR" \
    - "$TAG"
docker image ls "$TAG"
