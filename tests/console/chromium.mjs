// Chromium as the console's browser tests run it: headless, no sandbox (CI runs as root), no GPU,
// and no background connections (the network is closed: they would be refused many at a time).
export const CHROMIUM_ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-quic', '--no-first-run', '--disable-sync',
];
