// Run bench/krr_bench.py's and bench/ledger_bench.py's measure() inside Pyodide 314 under Node.
//   node bench/krr_bench_pyodide.mjs            # both
//   node bench/krr_bench_pyodide.mjs ledger     # only the ledger (composed ε) benchmark
import { loadPyodide } from "pyodide";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const only = process.argv[2];
const py = await loadPyodide();
// The sources and the data files py_core reads (headers, word tables, calibrations), its
// subpackages (accounting/, rootguard/) included, and the accounting oracle the ledger
// benchmark measures against (tests/py_core/krr_pld_oracle.py).
function copyTree(dir) {
  py.FS.mkdirTree(`/veil/${dir}`);
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    if (entry.name === "__pycache__") continue;
    const rel = `${dir}/${entry.name}`;
    if (entry.isDirectory()) copyTree(rel);
    else if (/\.(py|json|gz|txt)$/.test(entry.name)) py.FS.writeFile(`/veil/${rel}`, readFileSync(join(root, rel)));
  }
}
copyTree("py_core");
py.FS.mkdirTree("/veil/bench");
py.FS.mkdirTree("/veil/tests/py_core");
for (const rel of ["tests/__init__.py", "tests/py_core/__init__.py", "tests/py_core/krr_pld_oracle.py"]) {
  py.FS.writeFile(`/veil/${rel}`, readFileSync(join(root, rel)));
}
for (const name of ["krr_bench.py", "ledger_bench.py"]) {
  py.FS.writeFile(`/veil/bench/${name}`, readFileSync(join(root, "bench", name)));
}
py.runPython(`import sys\nsys.path.insert(0, "/veil"); sys.path.insert(0, "/veil/bench")`);
if (only !== "ledger") {
  console.log(py.runPython("import krr_bench\nkrr_bench.render(krr_bench.measure())"));
}
if (only !== "krr") {
  console.log(py.runPython("import ledger_bench\nledger_bench.render(ledger_bench.measure())"));
}
