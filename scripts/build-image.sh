#!/usr/bin/env bash
# Builds Major's container image, localhost/major:latest (`make image`),
# with Podman, from deploy/Containerfile. Its base, localhost/major-base:
# bookworm, is Debian bookworm made here from Debian's packages with
# debootstrap (made again only when the package list below changes):
# nothing is pulled from a container registry. Needs root (debootstrap),
# podman and debootstrap (Debian's packages podman, buildah, debootstrap:
# installed when missing), and the pinned CLI (scripts/install-claude.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
base=localhost/major-base:bookworm
image="${MAJOR_IMAGE:-localhost/major:latest}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages="ca-certificates,git,bubblewrap,tini"
# The base's recipe: a new one is built when it changes.
recipe="$(printf 'bookworm minbase %s v2' "$packages" | sha256sum | cut -c1-16)"

if [ "$(id -u)" != 0 ]; then
	echo "build-image: run as root (debootstrap makes the base's devices and owners)" >&2
	exit 1
fi
missing=()
for tool in podman buildah debootstrap; do
	command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "build-image: installing ${missing[*]} (Debian packages)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q "${missing[@]}" >&2 || { apt-get update -q >&2 && apt-get install -y -q "${missing[@]}" >&2; }
fi

if [ "$(podman image inspect --format '{{index .Labels "major.base"}}' "$base" 2>/dev/null)" != "$recipe" ]; then
	echo "build-image: making $base from Debian's packages (debootstrap, $mirror)" >&2
	rootfs="$(mktemp -d)"
	trap 'rm -rf "$rootfs"' EXIT
	debootstrap --variant=minbase --include="$packages" bookworm "$rootfs" "$mirror" >&2
	# The user the server runs as, and its folders: made here so that
	# building the image runs no container.
	chroot "$rootfs" useradd --system --uid 10001 --user-group --home-dir /var/lib/major --shell /usr/sbin/nologin major
	mkdir -p "$rootfs"/srv/major/vault "$rootfs"/var/lib/major "$rootfs"/etc/major/config
	chroot "$rootfs" chown major:major /srv/major/vault /var/lib/major
	chmod 0700 "$rootfs"/var/lib/major
	rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
	tar -C "$rootfs" --numeric-owner -c . | podman import --change "LABEL major.base=$recipe" --change 'CMD ["/bin/bash"]' - "$base" >&2
	rm -rf "$rootfs"
	trap - EXIT
fi

# The build context: the server, built static, and the pinned CLI.
claude="$(bash scripts/install-claude.sh)"
modules="$(cd "$(dirname "$claude")/.." && pwd)" # .../node_modules
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
CGO_ENABLED=0 "$GO" build -trimpath -o "$context/major" ./cmd/major
mkdir -p "$context/claude"
cp -a "$modules" "$context/claude/node_modules"
cp deploy/Containerfile "$context/Containerfile"
old="$(podman image inspect --format '{{.Id}}' "$image" 2>/dev/null || true)"
podman build --quiet --layers --tag "$image" --file "$context/Containerfile" "$context" >&2
# The image this one replaces (a build for another commit) is removed,
# so builds do not pile up; one still in use stays.
new="$(podman image inspect --format '{{.Id}}' "$image")"
if [ -n "$old" ] && [ "$old" != "$new" ]; then
	podman rmi "$old" >/dev/null 2>&1 || true
fi
echo "$image"
