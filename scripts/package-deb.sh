#!/usr/bin/env bash
# Build the Debian package of the durable-mcp command: target/debian/durable-mcp_VERSION_ARCH.deb,
# with the hardened systemd unit and the configuration file of packaging/debian/.
# Prints the package's path. Needs dpkg-deb (Debian and Ubuntu have it).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet --release --locked -p durable-mcp-cli
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
root=target/debian/durable-mcp_${version}_${arch}
rm -rf "$root"
install -D -m 0755 target/release/durable-mcp "$root/usr/bin/durable-mcp"
strip "$root/usr/bin/durable-mcp" 2>/dev/null || true
install -D -m 0644 packaging/debian/durable-mcp.service "$root/lib/systemd/system/durable-mcp.service"
install -D -m 0644 packaging/debian/durable-mcp.toml "$root/etc/durable-mcp/durable-mcp.toml"
install -D -m 0644 LICENSE "$root/usr/share/doc/durable-mcp/copyright"
install -D -m 0644 README.md "$root/usr/share/doc/durable-mcp/README.md"
install -d "$root/DEBIAN"
for script in postinst prerm postrm; do install -m 0755 "packaging/debian/$script" "$root/DEBIAN/$script"; done
echo /etc/durable-mcp/durable-mcp.toml > "$root/DEBIAN/conffiles"
size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: durable-mcp
Version: $version
Architecture: $arch
Maintainer: durable-mcp developers <durable-mcp@localhost>
Installed-Size: $size
Depends: libc6
Section: net
Priority: optional
Description: MCP servers that never lose a request
 A durable Model Context Protocol endpoint: sessions, resumable streams and durable
 execution kept in a store (SQLite, PostgreSQL or Redis). Its proxy makes any MCP
 server durable; the durable-mcp service runs it under systemd.
CONTROL
dpkg-deb --root-owner-group --build "$root" "$root.deb" >/dev/null
echo "$root.deb"
