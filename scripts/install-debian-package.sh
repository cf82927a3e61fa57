#!/usr/bin/env bash
# install-debian-package.sh PACKAGE COMMAND: installs Debian's PACKAGE
# when COMMAND is not on PATH, and prints COMMAND's path. Safe to run
# again. Needs root or password-less sudo to install. Services the
# package would start are not started (the tests start what they need).
set -euo pipefail
package="$1"
command="$2"

if ! command -v "$command" >/dev/null 2>&1; then
	echo "installing $package (Debian package)" >&2
	sudo=""
	if [ "$(id -u)" != 0 ]; then
		if sudo -n true 2>/dev/null; then
			sudo="sudo -n"
		else
			echo "install: $command is missing and this user cannot install packages: run 'apt-get install $package' as root" >&2
			exit 1
		fi
	fi
	export DEBIAN_FRONTEND=noninteractive
	# policy-rc.d answering 101 keeps the package's scripts from starting
	# its service.
	own_policy=""
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
		$sudo chmod +x /usr/sbin/policy-rc.d
		own_policy=1
	fi
	status=0
	$sudo apt-get install -y -q "$package" >&2 || { $sudo apt-get update -q >&2 && $sudo apt-get install -y -q "$package" >&2; } || status=$?
	[ -z "$own_policy" ] || $sudo rm -f /usr/sbin/policy-rc.d
	[ "$status" = 0 ] || exit "$status"
fi
command -v "$command"
