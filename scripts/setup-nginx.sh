#!/usr/bin/env bash
# Installs nginx (Debian's package) if it is missing; the load-balancer tests need it.
set -euo pipefail
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q nginx-light >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q nginx-light >/dev/null; }
# The package starts a system nginx on port 80; the tests run their own.
service nginx stop >/dev/null 2>&1 || pkill -x nginx || true
echo "nginx installed: $(/usr/sbin/nginx -v 2>&1)"
