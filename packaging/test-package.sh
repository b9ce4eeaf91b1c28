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
deb=$(realpath "$(ls -t target/debian/flowplane_*.deb | head -n1)")
echo "test-package.sh: built $deb"

was_installed=no
dpkg -s flowplane >/dev/null 2>&1 && was_installed=yes
cleanup() {
  if [ "$was_installed" = no ]; then
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq flowplane >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$deb" >/dev/null
dpkg -s flowplane | grep -q '^Status: install ok installed' || fail "not installed"

for f in /usr/bin/flowplane /usr/lib/systemd/system/flowplane.service /etc/default/flowplane \
         /etc/flowplane/flowplane.toml /usr/share/flowplane/grafana/flowplane.json \
         /usr/share/doc/flowplane/operations.md /usr/lib/systemd/system/flowplane-switch.service \
         /etc/default/flowplane-switch /etc/flowplane/switch.toml \
         /usr/share/doc/flowplane/switch-configuration.md; do
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
flowplane check --config /etc/flowplane/switch.toml | grep -q "^switch: 2 ports" \
  || fail "flowplane check does not read the packaged switch configuration"
out=$(flowplane demo --packets 300000 --workers 2)
echo "$out" | tail -n 12
echo "$out" | grep -q "^per backend" || fail "the demo printed no per-backend shares"

# systemd's parser accepts the installed units (their binary now exists).
for unit in flowplane.service flowplane-switch.service; do
  verify=$(systemd-analyze verify "/usr/lib/systemd/system/$unit" 2>&1 || true)
  if echo "$verify" | grep -q "$unit"; then
    fail "systemd-analyze verify: $verify"
  fi
done

# An upgrade (the same package again: dpkg runs postinst "configure <old version>") leaves the
# configuration and the state directory alone; with no running service it restarts nothing.
mkdir -p /var/lib/flowplane
echo kept > /var/lib/flowplane/upgrade-probe
out=$(DEBIAN_FRONTEND=noninteractive dpkg -i "$deb" 2>&1) || fail "upgrade: $out"
echo "$out" | grep -q "restarting" && fail "upgrade restarted a balancer that was not running: $out"
[ "$(cat /var/lib/flowplane/upgrade-probe)" = kept ] || fail "upgrade touched /var/lib/flowplane"
rm -f /var/lib/flowplane/upgrade-probe

# The upgrade of a running balancer, with systemctl and deb-systemd-invoke stood in for by
# scripts that record what they are asked, and the balancer by a process that answers SIGUSR2
# the way systemd sees a handover (the main PID changes): a valid configuration is handed over
# (SIGUSR2, no restart); one with [bgp] is restarted (try-restart); one the new binary refuses
# leaves the balancer running and says why.
fake=$(mktemp -d)
cat > "$fake/systemctl" <<'SH'
#!/bin/sh
echo "systemctl $*" >> "$FAKE_LOG"
case "$*" in
  *show*MainPID*) cat "$FAKE_PID" ;;
esac
exit 0
SH
cat > "$fake/deb-systemd-invoke" <<'SH'
#!/bin/sh
echo "deb-systemd-invoke $*" >> "$FAKE_LOG"
exit 0
SH
chmod 755 "$fake/systemctl" "$fake/deb-systemd-invoke"
postinst=/var/lib/dpkg/info/flowplane.postinst
[ -x "$postinst" ] || fail "$postinst missing"
export FAKE_LOG="$fake/log" FAKE_PID="$fake/pid"
sh -c 'trap "echo 4194000 > \"$FAKE_PID\"" USR2; while :; do sleep 0.1; done' &
main=$!
echo "$main" > "$FAKE_PID"
version=$(dpkg-query -W -f='${Version}' flowplane)
PATH="$fake:$PATH" "$postinst" configure "$version" >"$fake/out" 2>&1 \
  || { kill "$main"; fail "postinst (upgrade, service running): $(cat "$fake/out")"; }
kill "$main"
grep -q "hands over to the upgraded binary" "$fake/out" \
  || fail "postinst did not hand the running balancer over: $(cat "$FAKE_LOG" "$fake/out")"
grep -q "deb-systemd-invoke" "$FAKE_LOG" \
  && fail "postinst restarted a balancer that handed over: $(cat "$FAKE_LOG" "$fake/out")"
: > "$FAKE_LOG"
cp /etc/default/flowplane "$fake/default"
cfg=$(sh -c '. /etc/default/flowplane; echo "${FLOWPLANE_CONFIG:-/etc/flowplane/flowplane.toml}"')
# (a BGP deployment names its seed: the balancers share it)
{ sed 's/^\[balancer\]$/[balancer]\nseed = 1/' "$cfg"
  printf '\n[bgp]\nlocal_as = 65001\npeer = "10.0.0.1"\npeer_as = 65000\n'; } > "$fake/bgp.toml"
echo "FLOWPLANE_CONFIG=$fake/bgp.toml" >> /etc/default/flowplane
echo 1 > "$FAKE_PID"
PATH="$fake:$PATH" "$postinst" configure "$version" >"$fake/out" 2>&1 \
  || { cp "$fake/default" /etc/default/flowplane; fail "postinst (bgp): $(cat "$fake/out")"; }
cp "$fake/default" /etc/default/flowplane
/usr/bin/flowplane check --quiet --config "$fake/bgp.toml" >/dev/null 2>&1 \
  || fail "the [bgp] configuration of this test is refused: $(/usr/bin/flowplane check --config "$fake/bgp.toml" 2>&1)"
grep -q "^deb-systemd-invoke try-restart flowplane.service" "$FAKE_LOG" \
  || fail "postinst did not restart a balancer with [bgp]: $(cat "$FAKE_LOG" "$fake/out")"
grep -q "hands over" "$fake/out" && fail "postinst tried a handover with [bgp]: $(cat "$fake/out")"
: > "$FAKE_LOG"
cp /etc/default/flowplane "$fake/default"
printf '[balancer]\nbogus = 1\n' > "$fake/bad.toml"
echo "FLOWPLANE_CONFIG=$fake/bad.toml" >> /etc/default/flowplane
PATH="$fake:$PATH" "$postinst" configure "$version" >"$fake/out" 2>&1 \
  || { cp "$fake/default" /etc/default/flowplane; fail "postinst (bad configuration): $(cat "$fake/out")"; }
cp "$fake/default" /etc/default/flowplane
grep -q "deb-systemd-invoke" "$FAKE_LOG" \
  && fail "postinst restarted onto a configuration the binary refuses: $(cat "$FAKE_LOG")"
grep -q "bogus" "$fake/out" || fail "postinst did not say why it left the balancer running: $(cat "$fake/out")"
rm -rf "$fake"
echo "test-package.sh: upgrade path ok"

if [ "$was_installed" = no ]; then
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq flowplane >/dev/null
  [ ! -e /usr/bin/flowplane ] || fail "purge left /usr/bin/flowplane"
  [ ! -e /etc/flowplane/flowplane.toml ] || fail "purge left /etc/flowplane/flowplane.toml"
fi
echo "test-package.sh: ok"
