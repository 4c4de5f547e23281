// Headless Debian Chromium for the browser test and bench/wllama.ts: where
// it lives and the flags this closed-network machine needs (without the
// background-networking ones Chromium keeps dialing out and being refused).
import type { BrowserContext } from "playwright-core";

/** Debian's chromium (apt-get install -y chromium). */
export const CHROMIUM = "/usr/bin/chromium";

/** Launch flags: headless, no sandbox (root), no GPU, no background networking. */
export const CHROMIUM_ARGS: readonly string[] = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Chromium with a fresh profile in `profileDir` (playwright passes it as --user-data-dir). */
export async function launchChromium(profileDir: string, timeout: number): Promise<BrowserContext> {
  const { chromium } = await import("playwright-core");
  return await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    timeout,
    args: [...CHROMIUM_ARGS],
  });
}
