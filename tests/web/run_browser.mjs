// Opens a page in @sparticuz/chromium's headless Chromium, driven by puppeteer-core, and
// writes what the page put in window.__results: node run_browser.mjs URL OUT.json
// (run from the folder whose node_modules holds both packages).
import { writeFileSync } from "node:fs";
import chromium from "@sparticuz/chromium";
import puppeteer from "puppeteer-core";

const [url, outPath] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: await chromium.executablePath(),
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-dev-shm-usage", "--no-zygote", "--single-process"],
});
const console_lines = [];
try {
  const page = await browser.newPage();
  page.on("console", (m) => console_lines.push(`${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => console_lines.push(`pageerror: ${e}`));
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => window.__results !== undefined, { timeout: 240000 });
  const results = await page.evaluate(() => window.__results);
  results.console = console_lines;
  results.userAgent = await browser.userAgent();
  writeFileSync(outPath, JSON.stringify(results));
} catch (e) {
  writeFileSync(outPath, JSON.stringify({ error: String(e), console: console_lines }));
} finally {
  await browser.close();
}
