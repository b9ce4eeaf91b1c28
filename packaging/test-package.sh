#!/usr/bin/env bash
# Build the Debian package, install it as a user would on a fresh machine (apt resolves its
# dependencies), and check what it installed: the command runs the demo and checks the example
# configuration, systemd accepts the unit, the files are where the docs say. Then remove it again
# (unless flowplane was installed before this script ran, in which case the new build stays).
# Needs root. Part of scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "test-package.sh: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "needs root (it installs the package)"

packaging/build-deb.sh
deb=$(ls -t target/debian/flowplane_*.deb | head -n1)
echo "test-package.sh: built $deb"

was_installed=no
dpkg -s flowplane >/dev/null 2>&1 && was_installed=yes
cleanup() {
  if [ "$was_installed" = no ]; then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq flowplane >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "./$deb" >/dev/null
dpkg -s flowplane | grep -q '^Status: install ok installed' || fail "not installed"

for f in /usr/bin/flowplane /usr/lib/systemd/system/flowplane.service /etc/default/flowplane \
         /etc/flowplane/flowplane.toml /usr/share/flowplane/grafana/flowplane.json \
         /usr/share/doc/flowplane/operations.md; do
  [ -e "$f" ] || fail "$f missing from the package"
done
[ "$(stat -c %a /etc/flowplane/flowplane.toml)" = 600 ] \
  || fail "/etc/flowplane/flowplane.toml is readable by others (it holds the hash seed)"
dpkg-query -W -f='${Conffiles}\n' flowplane | grep -q /etc/flowplane/flowplane.toml \
  || fail "/etc/flowplane/flowplane.toml is not a conffile (an upgrade would overwrite edits)"

# The installed command, from a directory with nothing of this checkout in it.
cd /
flowplane --version
flowplane check --config /etc/flowplane/flowplane.toml >/dev/null
out=$(flowplane demo --packets 300000 --workers 2)
echo "$out" | tail -n 12
echo "$out" | grep -q "^per backend" || fail "the demo printed no per-backend shares"

# systemd's parser accepts the installed unit (its binary now exists).
verify=$(systemd-analyze verify /usr/lib/systemd/system/flowplane.service 2>&1 || true)
if echo "$verify" | grep -q 'flowplane.service'; then
  fail "systemd-analyze verify: $verify"
fi

if [ "$was_installed" = no ]; then
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq flowplane >/dev/null
  [ ! -e /usr/bin/flowplane ] || fail "purge left /usr/bin/flowplane"
  [ ! -e /etc/flowplane/flowplane.toml ] || fail "purge left /etc/flowplane/flowplane.toml"
fi
echo "test-package.sh: ok"
