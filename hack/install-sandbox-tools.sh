#!/usr/bin/env bash
# Part of `make setup`: the tools local sandboxes build their walls with (bubblewrap). As root on
# Debian they are installed when missing; otherwise this only says what is missing, and a local
# sandbox whose subagent requires its walls (`isolation: required`, the default) refuses to start.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"

command -v bwrap >/dev/null && exit 0
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
  ensure_debian_packages "${sandbox_apt_packages[@]}"
else
  log "bubblewrap (bwrap) is missing: local sandboxes will refuse to start unless a subagent says"
  log "'isolation: best-effort'; install it with: sudo apt-get install ${sandbox_apt_packages[*]}"
fi
