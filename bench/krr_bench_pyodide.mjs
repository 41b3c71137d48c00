// Run bench/krr_bench.py's measure() inside Pyodide 314 under Node.
//   node bench/krr_bench_pyodide.mjs
import { loadPyodide } from "pyodide";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const py = await loadPyodide();
py.FS.mkdirTree("/veil/py_core");
py.FS.mkdirTree("/veil/bench");
for (const name of readdirSync(join(root, "py_core"))) {
  // The sources and the data files py_core reads (headers, word tables, calibrations).
  if (/\.(py|json|gz|txt)$/.test(name)) py.FS.writeFile(`/veil/py_core/${name}`, readFileSync(join(root, "py_core", name)));
}
py.FS.writeFile("/veil/bench/krr_bench.py", readFileSync(join(root, "bench", "krr_bench.py")));
console.log(
  py.runPython(`
import sys
sys.path.insert(0, "/veil"); sys.path.insert(0, "/veil/bench")
import krr_bench
krr_bench.render(krr_bench.measure())
`),
);
