// Pyodide's python_stdlib.zip holds the standard library as source only (no
// .pyc), so every cold start of the core compiled the ~190 modules Pyodide and
// py_core import (asyncio, typing, dataclasses, ...) from source inside
// WebAssembly: most of the first start's time (measured with e2e/measure_start
// and bench/core_start_bench.mjs). This writes the same archive with each module
// compiled once, by Pyodide's own CPython (so the bytecode's version is the
// runtime's), as sourceless .pyc; build.mjs ships it instead of the original.
// The result depends only on the Pyodide release and the compiling code, so it
// is kept in build/cache/ and made again only when either changes.
import { Buffer } from "node:buffer";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";

const PY = String.raw`
import importlib._bootstrap_external as be
import zipfile

src = zipfile.ZipFile('/tmp/stdlib-in.zip')
out = zipfile.ZipFile('/tmp/stdlib-out.zip', 'w', zipfile.ZIP_DEFLATED)
compiled = 0
for info in sorted(src.infolist(), key=lambda i: i.filename):
    data = src.read(info)
    name = info.filename
    if name.endswith('.py'):
        # The path the module has at run time (tracebacks name it; no source to show).
        code = compile(data, '/lib/python314.zip/' + name, 'exec', dont_inherit=True)
        data = bytes(be._code_to_timestamp_pyc(code, 0, len(data)))
        name += 'c'
        compiled += 1
    out.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
out.close()
compiled
`;

/** The compiled archive for the Pyodide in `pyodideDir`, made (about a minute) or taken from `cacheDir`. */
export async function compiledStdlib(pyodideDir, cacheDir) {
  const version = JSON.parse(fs.readFileSync(path.join(pyodideDir, "package.json"), "utf8")).version;
  const key = createHash("sha256").update(version).update(PY).digest("hex").slice(0, 12);
  const cached = path.join(cacheDir, `python_stdlib-${version}-${key}.zip`);
  if (fs.existsSync(cached)) return cached;
  const started = Date.now();
  const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
  const pyodide = await loadPyodide({ indexURL: pyodideDir + path.sep, stdout: () => {}, stderr: () => {} });
  pyodide.FS.writeFile("/tmp/stdlib-in.zip", fs.readFileSync(path.join(pyodideDir, "python_stdlib.zip")));
  const compiled = pyodide.runPython(PY);
  fs.mkdirSync(cacheDir, { recursive: true });
  const tmp = `${cached}.tmp`;
  fs.writeFileSync(tmp, pyodide.FS.readFile("/tmp/stdlib-out.zip"));
  fs.renameSync(tmp, cached);
  console.log(`compiled ${compiled} standard-library modules for Pyodide ${version} in ${((Date.now() - started) / 1000).toFixed(0)} s (${path.relative(process.cwd(), cached)})`);
  return cached;
}

const CORE_PY = String.raw`
import importlib._bootstrap_external as be
import importlib.util
import json
import os

out = []
for name in json.loads(open('/tmp/core-names.json').read()):
    with open('/tmp/core/' + name, 'rb') as handle:
        data = handle.read()
    # Where unpackCore puts it (/veil/...): the cache file next to it, checked by nothing
    # (unchecked hash: the archive is unpacked fresh each start, its mtimes mean nothing).
    target = '/veil/' + name
    code = compile(data, target, 'exec', dont_inherit=True)
    pyc = importlib.util.cache_from_source(target)[len('/veil/'):]
    with open('/tmp/core/' + pyc.replace('/', '%'), 'wb') as handle:
        handle.write(bytes(be._code_to_hash_pyc(code, importlib.util.source_hash(data), checked=False)))
    out.append(pyc)
json.dumps(out)
`;

/**
 * [name, bytes] of a __pycache__ .pyc for every .py of `entries` (py_core and the
 * bridge), compiled by Pyodide's CPython: the cold start imports them without
 * compiling. Kept in `cacheDir` under a hash of the sources.
 */
export async function compiledCore(pyodideDir, cacheDir, entries) {
  const sources = entries.filter(([name]) => name.endsWith(".py"));
  const hash = createHash("sha256").update(CORE_PY);
  for (const [name, bytes] of sources) hash.update(name).update(bytes);
  const cached = path.join(cacheDir, `core-pyc-${hash.digest("hex").slice(0, 16)}.json`);
  if (fs.existsSync(cached)) return JSON.parse(fs.readFileSync(cached, "utf8")).map(([n, b64]) => [n, Buffer.from(b64, "base64")]);
  const { loadPyodide } = await import(pathToFileURL(path.join(pyodideDir, "pyodide.mjs")).href);
  const stdlib = await compiledStdlib(pyodideDir, cacheDir);
  const pyodide = await loadPyodide({ indexURL: pyodideDir + path.sep, stdLibURL: stdlib, stdout: () => {}, stderr: () => {} });
  pyodide.FS.mkdirTree("/tmp/core");
  for (const [name, bytes] of sources) {
    pyodide.FS.mkdirTree(`/tmp/core/${path.posix.dirname(name)}`);
    pyodide.FS.writeFile(`/tmp/core/${name}`, bytes);
  }
  pyodide.FS.writeFile("/tmp/core-names.json", JSON.stringify(sources.map(([name]) => name)));
  const names = JSON.parse(pyodide.runPython(CORE_PY));
  const out = names.map((name) => [name, Buffer.from(pyodide.FS.readFile(`/tmp/core/${name.replaceAll("/", "%")}`))]);
  fs.mkdirSync(cacheDir, { recursive: true });
  fs.writeFileSync(cached, JSON.stringify(out.map(([n, b]) => [n, b.toString("base64")])));
  return out;
}
