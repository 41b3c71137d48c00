// ESLint (flat config) for the extension's JavaScript and the e2e fixture
// pages: the recommended rules, strict equality, and imports sorted
// (eslint-plugin-simple-import-sort, which `npx eslint --fix` applies).
// Run by scripts/test.sh: npx eslint
import js from "@eslint/js";
import simpleImportSort from "eslint-plugin-simple-import-sort";
import globals from "globals";

export default [
  { ignores: ["build/**", "node_modules/**", ".venv/**"] },
  {
    files: ["extension/**/*.{js,mjs}", "e2e/fixtures/**/*.{js,mjs}"],
    ...js.configs.recommended,
    languageOptions: {
      ecmaVersion: "latest",
      sourceType: "module",
      globals: {
        ...globals.browser,
        ...globals.webextensions,
        // Compiled in by extension/build.mjs (esbuild's define).
        __VEIL_BUILD_ID__: "readonly",
        __VEIL_TEST_SWITCHES__: "readonly",
      },
    },
    plugins: { "simple-import-sort": simpleImportSort },
    rules: {
      ...js.configs.recommended.rules,
      eqeqeq: ["error", "always"],
      "simple-import-sort/imports": "error",
      "simple-import-sort/exports": "error",
      // issue 22: no function of 150 lines or more.
      "max-lines-per-function": ["error", { max: 149 }],
      "no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_", caughtErrors: "none" }],
    },
  },
  {
    // Node: the build scripts and the unit tests.
    files: ["extension/build.mjs", "extension/test/**/*.mjs", "e2e/fixtures/build.mjs"],
    languageOptions: { globals: { ...globals.node } },
  },
];
