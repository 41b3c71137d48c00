// Run py_core's stdlib-only checks inside Pyodide (the interpreter the extension
// ships) under Node, with no browser:
//   node tests/pyodide/run_checks.mjs [module ...]
// Each module (default: tests.py_core.core_checks) holds check_* functions,
// collected and run by tests/py_core/checklib.py.  Exit code 1 if any fails.
import { loadPyodide } from "pyodide";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const modules = process.argv.slice(2);
if (modules.length === 0) modules.push("tests.py_core.core_checks");

function copyTree(py, dir) {
  py.FS.mkdirTree("/veil/" + relative(root, dir));
  for (const name of readdirSync(dir)) {
    if (name === "__pycache__") continue;
    const path = join(dir, name);
    const target = "/veil/" + relative(root, path);
    if (statSync(path).isDirectory()) {
      copyTree(py, path);
    } else if (/\.(py|json|txt|tsv|gz)$/.test(name)) {
      py.FS.writeFile(target, readFileSync(path));
    }
  }
}

const started = performance.now();
const py = await loadPyodide();
copyTree(py, join(root, "py_core"));
py.FS.mkdirTree("/veil/tests");
py.FS.writeFile("/veil/tests/__init__.py", "");
copyTree(py, join(root, "tests", "py_core"));
py.runPython("import sys; sys.path.insert(0, '/veil')");
console.log(`pyodide ${py.version} (Python ${py.runPython("import sys; sys.version.split()[0]")}) ready in ${(performance.now() - started).toFixed(0)} ms`);

let failed = 0;
for (const module of modules) {
  const result = py.runPython(`
import json
from tests.py_core.checklib import all_checks, run_all
m = ${JSON.stringify(module)}
json.dumps({"names": [n for n, _ in all_checks(m)], "failures": run_all(m)})
`);
  const { names, failures } = JSON.parse(result);
  console.log(`${module}: ${names.length - failures.length}/${names.length} checks passed`);
  for (const f of failures) console.log("  FAIL " + f);
  failed += failures.length;
}
process.exit(failed ? 1 : 0);
