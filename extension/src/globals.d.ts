// What the extension's scripts find around them, for the type checks (tsconfig.json).

/** The build's source hash (extension/build.mjs, esbuild's define). */
declare const __VEIL_BUILD_ID__: string;
/** True in build/extension-test (the e2e tests' switches), false in the release build. */
declare const __VEIL_TEST_SWITCHES__: boolean;
/** Chrome's extension API; only chrome-api.js touches it. */
declare var chrome: any;

interface Window {
  /** The popup's current site settings (popup.js). */
  __veilSite?: any;
}
