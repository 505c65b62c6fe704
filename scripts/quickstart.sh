#!/usr/bin/env bash
# rocelab quick start, as root on Debian/Ubuntu, from a fresh clone:
#   bash scripts/quickstart.sh lab    install what is missing, bring up lab-pfc, show its status
#   bash scripts/quickstart.sh test   install what is missing, run the test suite
# Everything Python goes into .venv beside this checkout; system tools come from apt.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: bash scripts/quickstart.sh lab|test" >&2; exit 2; }
[ $# -eq 1 ] || usage
case "$1" in lab|test) ;; *) usage ;; esac
if [ "$(id -u)" != 0 ]; then
  echo "quickstart: run as root: the netns engine creates network namespaces and veth pairs" >&2
  exit 2
fi

# System tools the labs and tests use (tshark reads the probes' pcaps; FRR routes every lab that
# does not say `routing: static`, one instance per switch namespace); apt only runs when one is missing.
missing=()
for tool in ip:iproute2 ping:iputils-ping traceroute:traceroute tcpdump:tcpdump tshark:tshark python3:python3 \
            vtysh:frr; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
# The container tests build rocelab's images (debootstrap) and run them on Docker Engine; the
# dashboard's browser test drives Debian's headless Chromium through its chromedriver.
if [ "$1" = test ]; then
  for tool in dockerd:docker.io debootstrap:debootstrap chromium:chromium chromedriver:chromium-driver; do
    command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
  echo "quickstart: rocelab needs Python 3.11 or newer; this python3 is $(python3 --version)" >&2; exit 2; }

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev,train]'

case "$1" in
  lab)
    .venv/bin/rocelab up lab-pfc  # prints the lab's status table
    echo "next: . .venv/bin/activate; invoke exec h1 -- ping -c3 198.19.4.2; invoke graph; invoke down"
    ;;
  test)
    if ! docker info >/dev/null 2>&1; then  # no systemd in a CI container: start the daemon by hand
      setsid dockerd >/var/log/rocelab-dockerd.log 2>&1 </dev/null &
      for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
      docker info >/dev/null 2>&1 ||
        echo "quickstart: dockerd did not start (/var/log/rocelab-dockerd.log): the container tests will skip" >&2
    fi
    exec .venv/bin/rocelab test
    ;;
esac
