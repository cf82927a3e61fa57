#!/usr/bin/env bash
# Installs bubblewrap (bwrap), which runs every claude in a sandbox of its
# person's, from Debian's packages when it is missing, and checks that it
# can make a sandbox here. Safe to run again: it does nothing when bwrap
# is there. Needs root or password-less sudo to install.
set -euo pipefail

if ! command -v bwrap >/dev/null 2>&1; then
	echo "installing bubblewrap (Debian package bubblewrap)" >&2
	sudo=""
	if [ "$(id -u)" != 0 ]; then
		if sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		else
			echo "install-bubblewrap: bwrap is missing and this user cannot install packages: run 'apt-get install bubblewrap' as root, or start major with --sandbox=off (no boundary but the vault guard)" >&2
			exit 1
		fi
	fi
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get install -y -q bubblewrap >&2 || { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q bubblewrap >&2; }
fi
# The same namespaces every sandbox gets.
if ! bwrap --unshare-all --share-net --unshare-user --disable-userns --cap-drop ALL --die-with-parent \
	--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
	--proc /proc --dev /dev -- /bin/true; then
	echo "install-bubblewrap: bwrap cannot make a sandbox on this machine (user namespaces off? try sysctl kernel.unprivileged_userns_clone=1)" >&2
	exit 1
fi
command -v bwrap
