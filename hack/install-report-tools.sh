#!/usr/bin/env bash
# Part of `make setup`: Debian's Chromium, which the report test opens `belay report`'s page in
# (headless, with no network) to check what a person sees. As root on Debian it is installed when
# missing; otherwise this only says how to install it, and that test skips naming this script.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

command -v chromium >/dev/null && exit 0
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  ensure_debian_packages "${report_apt_packages[@]}"
else
  log "chromium is missing: the report test skips; install it with: sudo apt-get install ${report_apt_packages[*]}"
fi
