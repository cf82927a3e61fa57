// The web client in a real Chromium against the real server, the real
// Claude Code CLI and the offline scripted model.

import { describe, test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';
import jsQR from 'jsqr';

import { startStack, TOKEN, WEB } from './stack.js';
import { startProxy } from './proxy.js';
import { startPushService } from './push.js';

const SHOTS = path.join(WEB, 'e2e', 'screenshots');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const WAIT = 60000; // the longest any one expectation may take (a sandboxed CLI's cold start under load included)
// A 2×2 PNG, for the attach step.
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGM4IScHRAwQCgAfJgQRoo8irwAAAABJRU5ErkJggg==', 'base64');

let stack;
let browser;
let page; // the first client
let page2; // a second client on the same session, through proxy
let proxy;
let push; // the Web Push service the server sends to
let sessionID;
let broken = ''; // the first step that failed: the later ones build on it
let configDir; // the server's --config-dir: sebastian's daily budget
// Requests any page made to another origin than the server's.
const foreign = [];
const AXE = readFileSync(path.join(WEB, 'node_modules', 'axe-core', 'axe.min.js'), 'utf8');
const HEADERS = { Authorization: 'Bearer ' + TOKEN, 'X-Notes-Person': 'sebastian' };

// accessible runs axe-core in the page (through the DevTools protocol,
// so the page's own policy does not stand in its way) and fails on any
// serious or critical violation.
async function accessible(p, what) {
  if (!(await p.evaluate(() => typeof window.axe !== 'undefined'))) await p.evaluate(AXE);
  const found = await p.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] });
    return r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')
      .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
  });
  assert.deepEqual(found, [], `accessibility of ${what}`);
}

async function shot(p, name) {
  await p.screenshot({ path: path.join(SHOTS, name + '.png'), fullPage: false });
}

// waitFor polls fn in the page until it returns a truthy value.
function waitFor(p, fn, arg, what) {
  return p.waitForFunction(fn, arg, { timeout: WAIT, polling: 50 }).catch((err) => {
    throw new Error(`timed out waiting for ${what}: ${err.message.split('\n')[0]}`);
  });
}

// until polls an async condition in the test until it holds, for at most
// WAIT; the assertion after it says what did not hold.
async function until(cond) {
  for (const end = Date.now() + WAIT; !(await cond()) && Date.now() < end;) {
    await new Promise((r) => setTimeout(r, 50));
  }
}

// settled waits until the page's finite animations and transitions (a
// drawer sliding in or out) have finished.
function settled(p) {
  return waitFor(p, () => document.getAnimations().every((a) => a.playState !== 'running' || a.effect?.getTiming().iterations === Infinity), null, 'the page\'s transitions to finish');
}

// step is a test that leaves a screenshot of both pages when it fails.
function step(name, fn) {
  test(name, { timeout: 90000 }, async () => {
    if (broken) throw new Error(`not run: the earlier step "${broken}" failed`);
    try {
      await fn();
    } catch (err) {
      broken = name;
      const slug = name.replace(/\W+/g, '-').toLowerCase();
      for (const [p, n] of [[page, 1], [page2, 2]]) {
        if (p && !p.isClosed()) await shot(p, `failed-${slug}-page${n}`).catch(() => {});
      }
      if (stack) console.error('--- major log (tail) ---\n' + stack.log().split('\n').slice(-40).join('\n'));
      throw err;
    }
  });
}

async function newClient(viewport = { width: 1200, height: 800 }, base = stack.url, colorScheme = 'light') {
  const context = await browser.newContext({ viewport, colorScheme });
  // Every violation of the page's Content-Security-Policy is recorded.
  await context.addInitScript(() => {
    window.cspViolations = [];
    document.addEventListener('securitypolicyviolation', (e) => window.cspViolations.push(e.effectiveDirective));
  });
  const p = await context.newPage();
  p.setDefaultTimeout(WAIT);
  const origin = new URL(base).origin;
  p.on('request', (r) => {
    const u = r.url();
    if (!u.startsWith('blob:') && !u.startsWith('data:') && new URL(u).origin !== origin) foreign.push(u);
  });
  p.on('pageerror', (err) => console.error('page error:', err.message));
  await p.goto(base + '/app/');
  return p;
}

async function signIn(p, token = TOKEN, person = 'sebastian') {
  await p.getByLabel('Access token').fill(token);
  await p.getByLabel('Person').fill(person);
  await p.getByRole('button', { name: 'Sign in' }).click();
}

async function send(p, text) {
  const box = p.getByLabel('Message');
  await waitFor(p, () => !document.getElementById('message').disabled, null, 'the composer to be enabled');
  await box.fill(text);
  await box.press('Enter');
}

// lastReply is the text of the newest assistant reply, without its
// buttons (Copy, Regenerate).
function lastReply(p) {
  return p.evaluate(() => {
    const all = document.querySelectorAll('#transcript .msg.assistant');
    if (!all.length) return '';
    const copy = all[all.length - 1].cloneNode(true);
    for (const b of copy.querySelectorAll('.msg-actions, .copy-code')) b.remove();
    return copy.textContent;
  });
}

function waitReply(p, needle) {
  return waitFor(p, (n) => {
    const all = document.querySelectorAll('#transcript .msg.assistant');
    const last = all[all.length - 1];
    return last && !last.classList.contains('running') && last.textContent.includes(n);
  }, needle, `a finished reply containing ${JSON.stringify(needle)}`);
}

function waitIdle(p) {
  return waitFor(p, () => !document.getElementById('message').disabled && document.getElementById('interrupt').hidden, null, 'the turn to end');
}

// transcript is what the chat shows, message by message.
function transcript(p) {
  return p.evaluate(() => [...document.querySelectorAll('#transcript > *')].map((e) => e.className + ': ' + e.textContent));
}

describe('web client', () => {
  before(async () => {
    mkdirSync(SHOTS, { recursive: true });
    // Notifications go out half a second after a question waits
    // unwatched, to the test's push service on loopback.
    // sebastian has a daily budget, for the usage chart's line.
    configDir = mkdtempSync(path.join(os.tmpdir(), 'major-e2e-config-'));
    mkdirSync(path.join(configDir, 'persons', 'sebastian'), { recursive: true });
    writeFileSync(path.join(configDir, 'persons', 'sebastian', 'config.json'), JSON.stringify({ limits: { person_day_usd: 5 } }));
    stack = await startStack(['--notify-after', '500ms', '--push-allow-hosts', '127.0.0.1', '--config-dir', configDir]);
    proxy = await startProxy(stack.url);
    push = await startPushService();
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
        '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      timeout: 60000,
    });
  }, { timeout: 900000 });

  after(async () => {
    if (browser) await Promise.race([browser.close(), new Promise((r) => setTimeout(r, 10000))]);
    if (proxy) await proxy.close();
    if (push) await push.close();
    if (stack) await stack.stop();
    if (configDir) rmSync(configDir, { recursive: true, force: true });
  }, { timeout: 60000 });

  step('sign-in rejects a wrong token and accepts the right one', async () => {
    page = await newClient();
    await page.getByLabel('Access token').waitFor();
    // When the first screen is usable, against a bare page of the same
    // server loaded in the same browser: a measurement (BENCHMARKS.md,
    // row 6), printed, not asserted; the mark itself must be there.
    const usable = await page.evaluate(() => performance.getEntriesByName('major-usable')[0]?.startTime);
    assert.ok(usable > 0, 'the page marks when it is usable');
    const bare = await page.context().newPage();
    await bare.goto(stack.url + '/healthz');
    const loaded = await bare.evaluate(() => performance.getEntriesByType('navigation')[0].loadEventEnd);
    await bare.close();
    console.log(`e2e: the first screen was usable after ${Math.round(usable)} ms; a bare page of the server loaded in ${Math.round(loaded)} ms (x-baseline ${(usable / loaded).toFixed(2)})`);
    await accessible(page, 'the sign-in page');
    await signIn(page, 'not-the-token');
    await waitFor(page, () => /not valid/.test(document.getElementById('signin-error').textContent), null, 'the sign-in error');
    await shot(page, '01-signin-error');
    await signIn(page);
    await page.getByRole('heading', { name: 'What can I help with?' }).waitFor();
    assert.equal(await page.evaluate(() => JSON.parse(localStorage.getItem('major.auth')).person), 'sebastian');
    await shot(page, '02-signed-in');
  });

  step('the page runs under a strict Content-Security-Policy; injected inline script does not run', async () => {
    const res = await fetch(stack.url + '/app/');
    const csp = res.headers.get('content-security-policy');
    assert.match(csp, /script-src 'self';/);
    assert.match(csp, /connect-src 'self';/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
    assert.deepEqual(await page.evaluate(() => window.cspViolations), [], 'the page itself breaks no rule of its policy');
    await page.evaluate(() => {
      const s = document.createElement('script');
      s.textContent = 'window.injectedRan = 1';
      document.body.appendChild(s);
      const d = document.createElement('div');
      d.className = 'injected';
      d.innerHTML = '<img src="data:," onerror="window.injectedRan = 2"><span onclick="x" style="color: red">styled</span>';
      document.body.appendChild(d);
    });
    await waitFor(page, () => window.cspViolations.includes('script-src-elem') && window.cspViolations.includes('script-src-attr'), null, 'the policy to refuse the injected script');
    assert.equal(await page.evaluate(() => window.injectedRan), undefined);
    await page.evaluate(() => {
      window.cspViolations = [];
      document.querySelector('body > .injected').remove();
    });
  });

  step('a message gets its answer', async () => {
    await send(page, '[[say Hello from the browser]]');
    await waitReply(page, 'Hello from the browser');
    await waitIdle(page);
    sessionID = await page.evaluate(() => decodeURIComponent(location.hash.slice(1)));
    assert.match(sessionID, /^[0-9a-f-]{36}$/);
    const user = await page.locator('#transcript .msg.user').allTextContents();
    assert.deepEqual(user, ['[[say Hello from the browser]]']);
    assert.equal((await lastReply(page)).trim(), 'Hello from the browser');
    await waitFor(page, (id) => {
      const b = document.querySelector(`.session[data-session-id="${id}"]`);
      return b && b.textContent.includes('[[say Hello from the browser]]');
    }, sessionID, 'the chat in the sidebar with its title');
    // The page's title names the chat.
    assert.equal(await page.title(), '[[say Hello from the browser]] · Major');
    // The model chooser shows the model the CLI said it runs, by its name.
    const info = await (await fetch(stack.url + '/api/claude/sessions/' + sessionID, { headers: HEADERS })).json();
    assert.ok(info.model && info.model_name, `the session names its model: ${JSON.stringify(info)}`);
    await waitFor(page, (name) => document.getElementById('model').selectedOptions[0]?.textContent === name, info.model_name, 'the model in effect in the chooser');
    await shot(page, '03-answer');
  });

  step('a new chat\'s model chooser says the CLI\'s default, not an alias', async () => {
    await page.getByRole('button', { name: 'New chat' }).click();
    await page.locator('#controls').waitFor();
    await waitFor(page, () => document.getElementById('model').selectedOptions[0]?.textContent === 'Default model', null, '"Default model"');
    await page.locator(`.session[data-session-id="${sessionID}"]`).click();
    await waitIdle(page);
  });

  step('the model\'s text is shown as text, with only safe formatting', async () => {
    await send(page, '[[say <img src=x onerror="window.pwned=1"> is **bold** and [a link](javascript:window.pwned=2) <script>window.pwned=3</script>]]');
    await waitReply(page, 'is bold and');
    const check = await page.evaluate(() => {
      const all = document.querySelectorAll('#transcript .msg.assistant');
      const last = all[all.length - 1];
      return {
        imgs: document.querySelectorAll('#transcript img, #transcript script').length,
        strong: last.querySelector('strong')?.textContent,
        links: last.querySelectorAll('a').length,
        pwned: window.pwned,
        text: last.textContent,
      };
    });
    assert.equal(check.imgs, 0);
    assert.equal(check.strong, 'bold');
    assert.equal(check.links, 0);
    assert.equal(check.pwned, undefined);
    assert.match(check.text, /<img src=x onerror="window.pwned=1">/);
    await waitIdle(page);
  });

  step('a reply\'s Markdown: a table, a task list, a link to a new tab; copy a code block and the reply; regenerate it', async () => {
    const md = ['| Day | Cost |', '|:---|---:|', '| Mon | $1 |', '', '- [x] milk', '- [ ] eggs', '',
      'See [the docs](https://example.org/docs).', '', '```', 'let x = 1;', '```'].join('\n');
    await send(page, `[[say ${md}]]`);
    await waitReply(page, 'milk');
    await waitIdle(page);
    const last = page.locator('#transcript > .msg.assistant').last();
    assert.deepEqual(await last.locator('table th').allTextContents(), ['Day', 'Cost']);
    assert.deepEqual(await last.locator('table td').allTextContents(), ['Mon', '$1']);
    assert.deepEqual(await last.locator('li.task input[type=checkbox]').evaluateAll((l) => l.map((b) => b.checked)), [true, false]);
    const link = last.getByRole('link', { name: 'the docs' });
    assert.equal(await link.getAttribute('target'), '_blank');
    assert.match(await link.getAttribute('rel'), /noopener/);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.url });
    await last.getByRole('button', { name: 'Copy the code' }).click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'let x = 1;');
    await last.getByRole('button', { name: 'Copy the reply' }).click();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), md);
    await shot(page, '23-markdown');
    // Regenerate: the conversation goes back to before the message, which
    // is sent again; the old answer leaves the chat.
    const turn = Number(await last.getAttribute('data-turn'));
    await last.getByRole('button', { name: 'Regenerate the last answer' }).click();
    await waitFor(page, (t) => {
      const all = document.querySelectorAll('#transcript > .msg.assistant');
      const l = all[all.length - 1];
      return Number(l.dataset.turn) === t + 1 && !l.classList.contains('running') && l.textContent.includes('milk');
    }, turn, 'the regenerated answer');
    await waitIdle(page);
    const asked = await page.locator('#transcript > .msg.user').evaluateAll((l, m) => l.filter((e) => e.innerText === m).length, `[[say ${md}]]`);
    assert.equal(asked, 1, 'the message shows once');
    const history = await (await fetch(stack.url + '/api/claude/history?session_id=' + sessionID, { headers: HEADERS })).json();
    assert.equal(history.messages.filter((m) => m.role === 'user' && m.content === `[[say ${md}]]`).length, 1, 'the conversation has it once');
  });

  step('chats are renamed, pinned, found and deleted from the list, from the keyboard too', async () => {
    const post = async (p, body) => (await fetch(stack.url + '/api/claude' + p, { method: 'POST', headers: { ...HEADERS, 'Content-Type': 'application/json' }, body: JSON.stringify(body) })).json();
    const other = await post('/sessions', {});
    await post('/sessions/' + other.id + '/messages', { message: '[[say a soup of leeks and butter]]' });
    for (let i = 0; i < 200; i++) {
      const info = await (await fetch(stack.url + '/api/claude/sessions/' + other.id, { headers: HEADERS })).json();
      if (info.state === 'idle' && info.title) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const row = (id) => page.locator(`.session-row[data-session-id="${id}"]`);
    await row(other.id).waitFor();
    // Rename with the keyboard: the row's options, Rename, type, Enter.
    await row(sessionID).locator('.session-more').focus();
    await page.keyboard.press('Enter');
    await row(sessionID).getByRole('button', { name: 'Rename' }).waitFor();
    await shot(page, '24-chat-options');
    assert.equal(await page.evaluate(() => document.activeElement.textContent), 'Rename', 'the options take the focus');
    await page.keyboard.press('Enter');
    await row(sessionID).getByRole('textbox', { name: 'New title' }).waitFor();
    await page.keyboard.type('Greetings from the browser');
    await page.keyboard.press('Enter');
    await waitFor(page, (id) => document.querySelector(`.session[data-session-id="${id}"] .session-title`)?.textContent === 'Greetings from the browser', sessionID, 'the new title in the list');
    await waitFor(page, () => document.title === 'Greetings from the browser · Major' && document.getElementById('chat-title').textContent === 'Greetings from the browser', null, 'the new title on the page');
    // An empty title is refused, in the row.
    await row(sessionID).locator('.session-more').click();
    await row(sessionID).getByRole('button', { name: 'Rename' }).click();
    await row(sessionID).getByRole('textbox', { name: 'New title' }).fill('   ');
    await row(sessionID).getByRole('button', { name: 'Save' }).click();
    await row(sessionID).getByText('title is required').waitFor();
    await page.keyboard.press('Escape');
    await row(sessionID).locator('.session-options').waitFor({ state: 'hidden' });

    // The newer chat is first; pinned, the older one goes on top.
    const order = () => page.locator('#sessions > li').evaluateAll((l) => l.map((e) => e.dataset.sessionId));
    assert.equal((await order())[0], other.id);
    await row(sessionID).locator('.session-more').click();
    await row(sessionID).getByRole('button', { name: 'Pin on top' }).click();
    await waitFor(page, (id) => document.querySelector('#sessions > li')?.dataset.sessionId === id, sessionID, 'the pinned chat on top');
    await row(sessionID).locator('.mark.pin').waitFor();
    assert.equal((await (await fetch(stack.url + '/api/claude/sessions/' + sessionID, { headers: HEADERS })).json()).pinned, true);

    // Search: by a word of the messages, then cleared.
    await page.getByRole('searchbox', { name: 'Search chats' }).fill('leeks');
    await waitFor(page, (id) => {
      const ids = [...document.querySelectorAll('#sessions > li')].map((e) => e.dataset.sessionId);
      return ids.length === 1 && ids[0] === id;
    }, other.id, 'only the chat with leeks');
    assert.match(await row(other.id).locator('.session-match').textContent(), /leeks/);
    assert.ok(await page.locator('#controls').isVisible(), 'the open chat keeps its settings while the list shows a search');
    await shot(page, '25-search');
    await page.getByRole('searchbox', { name: 'Search chats' }).fill('nothing says this');
    await page.getByText('No chat has these words.').waitFor();
    await page.getByRole('searchbox', { name: 'Search chats' }).fill('');
    await waitFor(page, () => document.querySelectorAll('#sessions > li').length >= 2, null, 'every chat again');

    // Delete asks first, then the chat is gone, here and on the server.
    await row(other.id).locator('.session-more').click();
    await row(other.id).getByRole('button', { name: 'Delete' }).click();
    await row(other.id).getByText('Delete this chat and its history?').waitFor();
    await row(other.id).getByRole('button', { name: 'Delete' }).click();
    await row(other.id).waitFor({ state: 'detached' });
    assert.equal((await fetch(stack.url + '/api/claude/sessions/' + other.id, { headers: HEADERS })).status, 404);
    // The renamed chat stays pinned: unpinned, for the steps after.
    await row(sessionID).locator('.session-more').click();
    await row(sessionID).getByRole('button', { name: 'Unpin' }).click();
    await row(sessionID).locator('.mark.pin').waitFor({ state: 'detached' });
  });

  step('Interrupt stops a running turn', async () => {
    await send(page, '[[slow 40 50]]');
    await page.getByRole('button', { name: 'Interrupt' }).waitFor();
    assert.equal(await page.getByLabel('Message').isDisabled(), false, 'the composer stays open while a turn runs');
    assert.equal(await page.getByRole('button', { name: 'Send now' }).isVisible(), true, 'Send now is offered while a turn runs');
    await waitFor(page, () => {
      const all = document.querySelectorAll('#transcript .msg.assistant');
      return (all[all.length - 1].textContent.match(/tick/g) || []).length >= 3;
    }, null, 'some ticks');
    await shot(page, '04-running');
    await page.getByRole('button', { name: 'Interrupt' }).click();
    await waitReply(page, 'Interrupted');
    await waitIdle(page);
    const ticks = ((await lastReply(page)).match(/tick/g) || []).length;
    assert.ok(ticks >= 3 && ticks < 40, `the turn stopped part way: ${ticks} ticks`);
    await shot(page, '05-interrupted');
  });

  step('while a reply runs, Enter queues a message (shown, cancellable) and Send now gives one to the reply', async () => {
    const headers = { Authorization: 'Bearer ' + TOKEN, 'X-Notes-Person': 'sebastian' };
    await send(page, '[[steps 4 1500]]');
    await page.getByRole('button', { name: 'Send now' }).waitFor();
    const box = page.getByLabel('Message');
    await box.fill('queued, then cancelled');
    await box.press('Enter');
    const cancelled = page.locator('#queue li', { hasText: 'queued, then cancelled' });
    await cancelled.waitFor();
    await box.fill('[[say after the reply]]');
    await box.press('Enter');
    await page.locator('#queue li', { hasText: 'after the reply' }).waitFor();
    await shot(page, '20-queued');
    await cancelled.getByRole('button', { name: /Cancel/ }).click();
    await cancelled.waitFor({ state: 'detached' });
    const queue = await (await fetch(stack.url + '/api/claude/sessions/' + sessionID + '/queue', { headers })).json();
    assert.deepEqual(queue.queue.map((q) => q.message), ['[[say after the reply]]'], 'the server holds what the page shows');
    await box.fill('also mention bananas');
    await page.getByRole('button', { name: 'Send now' }).click();
    // It shows inside the running reply, where it went in.
    await waitFor(page, () => [...document.querySelectorAll('#transcript .msg.assistant .msg.user.steered')]
      .some((e) => e.textContent === 'also mention bananas'), null, 'the steered message inside the reply');
    await shot(page, '21-steered');
    // The reply heard it, and the queued message ran after it, on its own.
    await waitReply(page, 'after the reply');
    await waitIdle(page);
    // The model's own words (not the bubble) name it.
    const steps = await page.evaluate(() => {
      const all = document.querySelectorAll('#transcript > .msg.assistant');
      return [...all[all.length - 2].querySelectorAll('.md')].map((e) => e.textContent).join(' ');
    });
    assert.match(steps, /STEPS DONE; heard: /);
    assert.match(steps, /bananas/, 'the model heard the message within its reply');
    assert.equal(await page.locator('#queue li').count(), 0, 'nothing waits any more');
    const history = await (await fetch(stack.url + '/api/claude/history?session_id=' + sessionID, { headers })).json();
    const said = history.messages.filter((m) => m.role === 'user').map((m) => m.content);
    assert.ok(!said.includes('queued, then cancelled'), 'the cancelled message never ran');
    assert.deepEqual(said.slice(-3), ['[[steps 4 1500]]', 'also mention bananas', '[[say after the reply]]']);
    await shot(page, '22-after-steering');
  });

  step('a second client on the same chat sees the same messages', async () => {
    page2 = await newClient(undefined, proxy.url);
    await signIn(page2);
    await page2.locator(`.session[data-session-id="${sessionID}"]`).click();
    const want = await transcript(page);
    await waitFor(page2, (n) => document.querySelectorAll('#transcript > *').length === n && !document.querySelector('#transcript .running'), want.length, 'the replay');
    assert.deepEqual(await transcript(page2), want);
  });

  step('a question is answered from one client and leaves both', async () => {
    await send(page, '[[ask]]');
    for (const p of [page, page2]) {
      const card = p.locator('.card.question');
      await card.waitFor();
      await card.getByText('Which color?').waitFor();
      await card.getByRole('button', { name: /Red/ }).waitFor();
    }
    await page.locator(`.session[data-session-id="${sessionID}"] .badge.waiting`).waitFor();
    await shot(page, '06-question');
    await shot(page2, '07-question-second-client');
    await page.locator('.card.question').getByRole('button', { name: /Blue/ }).click();
    for (const p of [page, page2]) {
      await waitReply(p, '"Which color?"="Blue"');
      assert.equal(await p.locator('.card').count(), 0, 'the card is gone');
      assert.match(await lastReply(p), /Which color\? → Blue/);
    }
    await waitIdle(page);
    await shot(page2, '08-question-answered-second-client');
  });

  step('a multi-select question takes several options', async () => {
    await send(page, '[[ask-multi]]');
    const card = page.locator('.card.question');
    await card.waitFor();
    await page2.locator('.card.question').waitFor();
    await card.getByLabel(/Cheese/).check();
    await card.getByLabel(/Basil/).check();
    await shot(page, '09-multi-select');
    await card.getByRole('button', { name: 'Send answer' }).click();
    await waitReply(page, '"Which toppings?"="Cheese, Basil"');
    await waitFor(page2, () => !document.querySelector('.card'), null, 'the card to leave the second client');
    await waitIdle(page);
  });

  step('"Other" sends free text', async () => {
    await send(page, '[[ask]]');
    const card = page.locator('.card.question');
    await card.waitFor();
    await card.getByLabel('Other').fill('A deep forest green');
    await card.getByLabel('Other').press('Enter');
    await waitReply(page, '"Which color?"="A deep forest green"');
    await waitIdle(page);
  });

  step('a question card is answered from the keyboard alone', async () => {
    await send(page, '[[ask]]');
    await page.locator('.card.question').waitFor();
    await page.getByLabel('Message').focus();
    // Back from the composer, the way a keyboard goes, to the card's option.
    let reached = false;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press('Shift+Tab');
      reached = await page.evaluate(() => !!document.activeElement.closest('.card.question') && /Blue/.test(document.activeElement.textContent));
    }
    assert.ok(reached, 'the option is reachable with Shift+Tab from the composer');
    await page.keyboard.press('Enter');
    await waitReply(page, '"Which color?"="Blue"');
    await waitIdle(page);
  });

  step('permission prompts: deny, then allow; each post asks on its own', async () => {
    const post = '[[tool mcp__linkedin__linkedin_post {"text":"Notes on notes"}]]';
    await send(page, post);
    let card = page.locator('.card.permission');
    await card.waitFor();
    // What is decided comes first, whole: the post's words, under a
    // person's name for the tool.
    await card.getByRole('heading', { name: 'Publish on LinkedIn?' }).waitFor();
    assert.equal(await card.locator('.card-draft').textContent(), 'Notes on notes');
    assert.ok(await card.locator('.card-draft').isVisible(), 'the words are shown, not folded away');
    await page2.locator('.card.permission').waitFor();
    await accessible(page, 'the chat with a permission card open');
    await shot(page, '10-permission');
    await card.getByRole('button', { name: 'Deny' }).click();
    await waitReply(page, 'Denied: Publish on LinkedIn.');
    assert.match(await lastReply(page), /denied/i);
    await waitFor(page2, () => !document.querySelector('.card'), null, 'the card to leave the second client');
    await waitIdle(page);

    await send(page, post);
    card = page.locator('.card.permission');
    await card.waitFor();
    // A post is approved for its own words only: no "for this session".
    assert.equal(await card.getByRole('button', { name: 'Allow for this session' }).count(), 0);
    await card.getByRole('button', { name: 'Allow', exact: true }).click();
    await waitReply(page, 'Allowed: Publish on LinkedIn.');
    await waitIdle(page);

    // The next post asks again.
    await send(page, post);
    card = page.locator('.card.permission');
    await card.waitFor();
    await card.getByRole('button', { name: 'Deny' }).click();
    await waitReply(page, 'Denied: Publish on LinkedIn.');
    await waitIdle(page);
  });

  step('a tool call the vault guard refuses looks refused', async () => {
    await send(page, '[[tool Read {"file_path":"/etc/passwd"}]]');
    await waitIdle(page);
    const refused = page.locator('#transcript .tool.refused').last();
    await refused.waitFor();
    assert.match(await refused.textContent(), /Read a note.*Not allowed: Access denied/);
    await shot(page, '26-refused-tool');
  });

  step('"Ask first" shows an edit\'s lines before it runs; "Plan first" shows the plan as Markdown', async () => {
    const note = path.join(stack.tmp, 'vault', 'sebastian', 'welcome.md');
    await page.getByLabel('Mode', { exact: true }).selectOption('default');
    await waitFor(page, () => document.getElementById('mode').value === 'default', null, 'Ask first');
    await send(page, `[[tool Read {"file_path":"${note}"}]]`);
    await waitIdle(page);
    await send(page, `[[tool Edit {"file_path":"${note}","old_string":"The notes of sebastian.","new_string":"The notes of Sebastian, edited."}]]`);
    let card = page.locator('.card.permission');
    await card.waitFor();
    await card.getByRole('heading', { name: 'Edit a note?' }).waitFor();
    assert.deepEqual(await card.locator('.card-diff .del').allTextContents(), ['- The notes of sebastian.\n']);
    assert.deepEqual(await card.locator('.card-diff .ins').allTextContents(), ['+ The notes of Sebastian, edited.\n']);
    await accessible(page, 'the chat with an edit card open');
    await shot(page, '27-edit-card');
    await card.getByRole('button', { name: 'Deny' }).click();
    await waitReply(page, 'Denied: Edit a note.');
    await waitIdle(page);
    assert.match(readFileSync(note, 'utf8'), /The notes of sebastian\./, 'the note is unchanged');

    await page.getByLabel('Mode', { exact: true }).selectOption('plan');
    await waitFor(page, () => document.getElementById('mode').value === 'plan', null, 'plan mode');
    await send(page, '[[tool ExitPlanMode {"plan":"# Tidy the notes\\n\\n1. Read them\\n2. **Merge** the duplicates"}]]');
    card = page.locator('.card.permission');
    await card.waitFor();
    await card.getByRole('heading', { name: 'Go ahead with the plan?' }).waitFor();
    assert.equal(await card.locator('.card-plan h3').textContent(), 'Tidy the notes');
    assert.equal(await card.locator('.card-plan ol li strong').textContent(), 'Merge');
    await shot(page, '28-plan-card');
    await card.getByRole('button', { name: 'Deny' }).click();
    await waitReply(page, 'Denied: Go ahead with the plan.');
    await waitIdle(page);
    await page.getByLabel('Mode', { exact: true }).selectOption('acceptEdits');
    await waitFor(page, () => document.getElementById('mode').value === 'acceptEdits', null, 'Edit notes');
  });

  step('the Usage page charts 30 days of cost and tokens with the daily budget', async () => {
    await page.getByRole('button', { name: 'Usage' }).click();
    const view = page.locator('#usage-view');
    await view.locator('#usage-cost svg').waitFor();
    assert.equal(await view.locator('#usage-cost .bar').count(), 30);
    assert.equal(await view.locator('#usage-tokens .bar').count(), 30);
    assert.equal(await view.locator('#usage-cost .budget').count(), 1, 'the budget is a line');
    assert.match(await view.locator('#usage-summary').textContent(), /Today \$\d+\.\d\d of \$5\.00 a day/);
    assert.equal(await view.locator('#usage-table tbody tr').count(), 30);
    await accessible(page, 'the usage page');
    await shot(page, '29-usage');
    await page.keyboard.press('Escape');
    await view.waitFor({ state: 'hidden' });
  });

  step('the second client re-attaches after a drop without losing or repeating events', async () => {
    await send(page, '[[slow 30 100]]');
    await waitFor(page2, () => /tick/.test(document.querySelector('#transcript .msg.assistant:last-child')?.textContent || ''), null, 'ticks on the second client');
    proxy.setDown(true);
    await waitFor(page2, () => document.getElementById('connection').textContent.includes('Reconnecting'), null, 'the second client to notice the drop');
    await shot(page2, '11-reconnecting');
    await new Promise((r) => setTimeout(r, 800));
    proxy.setDown(false);
    await waitReply(page, 'tick');
    await waitIdle(page);
    await waitFor(page2, () => !document.querySelector('#transcript .running') && document.getElementById('connection').textContent === '', null, 'the second client to catch up');
    const ticks = (await lastReply(page2)).match(/tick/g).length;
    assert.equal(ticks, 30);
    assert.deepEqual(await transcript(page2), await transcript(page));
  });

  step('a reload rebuilds the chat from the replay', async () => {
    const before = await transcript(page);
    await page.reload();
    await waitFor(page, (n) => document.querySelectorAll('#transcript > *').length === n && !document.querySelector('#transcript .running'), before.length, 'the replay after reload');
    // Replayed deltas are drawn on a short timer.
    await until(async () => JSON.stringify(await transcript(page)) === JSON.stringify(before));
    assert.deepEqual(await transcript(page), before);
    assert.equal(await page.locator('.card').count(), 0);
    await shot(page, '12-reloaded');
  });

  step('a post drafted from the phone app shows as a card with its words', async () => {
    // The phone app's exact request: form-encoded chat-stream, no
    // interactive flag, and no client of this session attached.
    const headers = { Authorization: 'Bearer ' + TOKEN, 'X-Notes-Person': 'sebastian' };
    const created = await (await fetch(stack.url + '/api/claude/sessions', { method: 'POST', headers })).json();
    const text = 'Drafted on the phone: notes on notes';
    const body = new URLSearchParams({
      message: `[[tool mcp__linkedin__linkedin_post {"text":"${text}"}]]`, session_id: created.id,
    });
    const answer = await (await fetch(stack.url + '/api/claude/chat-stream', { method: 'POST', headers, body })).text();
    assert.match(answer, /Nothing is published yet\. This is the LinkedIn post, word for word:/, 'the server shows the draft and asks');
    await page.reload();
    // The press and the release come apart while the replay of the chat
    // open before redraws the list, as a person's click may: it still
    // opens the chat.
    const row = page.locator(`.session[data-session-id="${created.id}"]`);
    await row.waitFor();
    const box = await row.boundingBox();
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.down();
    await new Promise((r) => setTimeout(r, 600));
    await page.mouse.up();
    const card = page.locator('.card.permission');
    await card.waitFor();
    await card.getByRole('heading', { name: 'Publish on LinkedIn?' }).waitFor();
    assert.equal(await card.locator('.card-draft').textContent(), text, 'the card shows the exact words');
    await shot(page, '15-draft');
    await card.getByRole('button', { name: 'Deny' }).click();
    await waitFor(page, () => /Declined: Publish on LinkedIn/.test(document.querySelector('#transcript .answered')?.textContent || ''), null, 'the declined draft');
    assert.equal(await page.locator('.card').count(), 0);
  });

  step('the mode and model of a chat change from the page; spending shows; a fork keeps the chat', async () => {
    const headers = { Authorization: 'Bearer ' + TOKEN, 'X-Notes-Person': 'sebastian' };
    const info = async (id) => (await fetch(stack.url + '/api/claude/sessions/' + id, { headers })).json();
    await page.reload();
    await page.locator(`.session[data-session-id="${sessionID}"]`).click();
    await page.locator('#controls').waitFor();
    await waitFor(page, () => /\$\d+\.\d\d in this chat/.test(document.getElementById('spend').textContent), null, 'the chat\'s spending');
    await page.getByLabel('Mode', { exact: true }).selectOption('plan');
    await waitFor(page, () => document.getElementById('mode').value === 'plan', null, 'plan mode');
    await until(async () => (await info(sessionID)).permission_mode === 'plan');
    assert.equal((await info(sessionID)).permission_mode, 'plan', 'the server has the mode');
    await page.getByLabel('Model', { exact: true }).selectOption('haiku');
    await until(async () => (await info(sessionID)).model === 'haiku');
    assert.equal((await info(sessionID)).model, 'haiku', 'the server has the model');
    await page.getByLabel('Mode', { exact: true }).selectOption('acceptEdits');
    await shot(page, '16-controls');
    const before = (await transcript(page)).filter((line) => line.startsWith('msg user')).length;
    await page.getByRole('button', { name: 'Fork chat' }).click();
    await waitFor(page, (id) => location.hash && decodeURIComponent(location.hash.slice(1)) !== id, sessionID, 'the fork to open');
    await waitFor(page, (n) => document.querySelectorAll('#transcript > .msg.user').length === n, before, 'the fork\'s transcript');
    const fork = await page.evaluate(() => decodeURIComponent(location.hash.slice(1)));
    await page.locator(`.session-row[data-session-id="${fork}"] .mark.fork`).waitFor();
  });

  step('the Terminal view shows Claude Code on the same conversation', async () => {
    await page.locator(`.session[data-session-id="${sessionID}"]`).click();
    await waitIdle(page);
    await page.getByRole('button', { name: 'Terminal' }).click();
    // The screen as xterm.js draws it (blank cells are no-break spaces).
    const screenHas = (args) => {
      const text = (document.querySelector('#terminal .xterm-rows')?.textContent || '').replace(/\u00a0/g, ' ');
      return text.split(args.needle).length > args.times;
    };
    await waitFor(page, screenHas, { needle: 'accept edits on', times: 1 }, "the CLI's screen");
    // xterm.js styles its cells inline: under the page's policy too.
    assert.deepEqual(await page.evaluate(() => window.cspViolations), [], 'the terminal breaks no rule of the policy');
    assert.ok(await page.evaluate(() => document.querySelectorAll('#terminal style').length > 0 && [...document.querySelectorAll('#terminal style')].every((s) => s.sheet)), 'the terminal\'s style elements apply');
    // The signs Claude Code draws come from the vendored fonts, so none is
    // a box: each one is drawn unlike a character no font has (U+2427, in
    // the symbols fonts' range, so their own box is the one compared).
    const drawn = await page.evaluate(async () => {
      await document.fonts.ready;
      const stack = '28px "Major Mono", "Major Symbols", "Major Symbols 1", monospace';
      await Promise.all(['⎿⏵✻●❯─a\u2427'].map((t) => document.fonts.load(stack, t)));
      const c = document.createElement('canvas');
      const g = c.getContext('2d');
      const pixels = (ch) => {
        c.width = 40; c.height = 40;
        g.font = stack;
        g.fillText(ch, 4, 30);
        return Array.from(g.getImageData(0, 0, 40, 40).data).join(',');
      };
      const box = pixels('\u2427');
      return Object.fromEntries([...'⎿⏵✻●❯─a'].map((ch) => [ch, pixels(ch) !== box]));
    });
    assert.deepEqual(drawn, { '⎿': true, '⏵': true, '✻': true, '●': true, '❯': true, '─': true, a: true }, 'the CLI\'s signs have glyphs');
    await shot(page, '18-terminal');
    await page.keyboard.type('[[say Typed in the terminal]]');
    // Enter once the CLI shows the text: keys that reach it together are
    // taken as a paste, and a pasted Enter does not submit.
    await waitFor(page, screenHas, { needle: 'Typed in the terminal', times: 1 }, 'the typed prompt on the screen');
    await page.waitForTimeout(200);
    await page.keyboard.press('Enter');
    // Once as typed, once as the model's answer.
    await waitFor(page, screenHas, { needle: 'Typed in the terminal', times: 2 }, "the model's answer in the terminal");
    await shot(page, '19-terminal-answer');
    await page.getByRole('button', { name: 'Back to the chat' }).click();
    await page.locator('#terminal-view').waitFor({ state: 'hidden' });
    // What was said in the terminal shows in the chat.
    await page.locator('#transcript > .msg.user.terminal', { hasText: '[[say Typed in the terminal]]' }).waitFor();
    await page.locator('#transcript > .msg.assistant.terminal', { hasText: 'Typed in the terminal' }).waitFor();
    await shot(page, '19b-terminal-turn-in-chat');
    // The chat continues the conversation, the terminal's turn included.
    await send(page, '[[recall]]');
    await waitReply(page, 'Typed in the terminal');
    await waitIdle(page);
  });

  step('an image attached from the page reaches the model and shows as a thumbnail', async () => {
    await page.locator(`.session[data-session-id="${sessionID}"]`).click();
    await waitIdle(page);
    await page.locator('#attach-files').setInputFiles({ name: 'whiteboard.png', mimeType: 'image/png', buffer: PNG });
    await page.locator('#tray .tray-item').getByText('whiteboard.png').waitFor();
    await send(page, 'Put this in my notes [[blocks]]');
    await waitReply(page, 'image image/png');
    assert.match(await lastReply(page), /Attached file "whiteboard\.png" \(image\/png, [^)]*\), saved in the person's notes at attachments\/\d{4}-\d\d\/whiteboard\.png/);
    assert.equal(await page.locator('#tray').isVisible(), false, 'the tray is empty after sending');
    const thumb = page.locator('#transcript .msg.user').last().locator('img.thumb');
    await waitFor(page, () => {
      const imgs = document.querySelectorAll('#transcript .msg.user img.thumb');
      const img = imgs[imgs.length - 1];
      return img && img.complete && img.naturalWidth === 2;
    }, null, 'the thumbnail from the vault');
    assert.match(await thumb.getAttribute('src'), /^blob:/);
    await waitIdle(page);
    await shot(page, '20-attached-image');
  });

  step('a turn that changed a note shows it; the diff opens and Undo restores the note', async () => {
    const note = path.join(stack.tmp, 'vault', 'sebastian', 'e2e-note.md');
    await send(page, `[[tool Write {"file_path":"${note}","content":"hello from the browser\\n"}]]`);
    await waitReply(page, 'Changed: 1 note');
    await waitIdle(page);
    await page.locator('#transcript .msg.assistant').last().getByRole('button', { name: 'Changed: 1 note' }).click();
    const dialog = page.locator('#diff-dialog');
    await dialog.getByText('+hello from the browser').waitFor();
    await dialog.getByText('e2e-note.md', { exact: true }).first().waitFor();
    await shot(page, '21-diff');
    await dialog.getByRole('button', { name: 'Undo' }).click();
    await dialog.getByText(/Undo restores 1 note/).waitFor();
    await dialog.getByRole('button', { name: 'Restore these notes' }).click();
    await dialog.getByText('Restored 1 note.').waitFor();
    assert.equal(existsSync(note), false, 'the note the turn added is gone again');
    await dialog.getByRole('button', { name: 'Close' }).click();
  });

  step('a note attached from the picker reaches the model; the notes panel shows Markdown', async () => {
    await page.getByRole('button', { name: 'Note', exact: true }).click();
    await page.locator('#notes-panel').getByRole('button', { name: /welcome\.md/ }).click();
    await page.locator('#tray .tray-item').getByText('welcome.md').waitFor();
    await send(page, '[[blocks]]');
    await waitReply(page, 'text [Attached note welcome.md');
    await waitIdle(page);
    await page.getByRole('button', { name: 'Notes', exact: true }).click();
    await page.locator('#notes-panel').getByRole('button', { name: /welcome\.md/ }).click();
    await page.locator('#notes-panel h3', { hasText: 'Welcome' }).waitFor();
    await page.locator('#notes-panel').getByRole('button', { name: 'Close' }).click();
  });

  step('an uploaded SVG or HTML file with a script never runs', async () => {
    const headers = { Authorization: 'Bearer ' + TOKEN, 'X-Notes-Person': 'sebastian' };
    const form = new FormData();
    form.append('files', new Blob(['<svg xmlns="http://www.w3.org/2000/svg"><script>top.pwned = "svg"; </script></svg>'], { type: 'image/svg+xml' }), 'evil.svg');
    form.append('files', new Blob(['<html><body><script>top.pwned = "html"; </script>hi</body></html>'], { type: 'text/html' }), 'evil.html');
    const res = await fetch(`${stack.url}/api/claude/sessions/${sessionID}/attachments`, { method: 'POST', headers, body: form });
    assert.equal(res.status, 201);
    const files = (await res.json()).attachments;
    assert.deepEqual(files.map((f) => f.media_type), ['image/svg+xml', 'text/html']);
    // Opened directly, with the person's credentials, in this page's
    // origin: each one is a download, never a document.
    const context = await browser.newContext({ extraHTTPHeaders: headers });
    const direct = await context.newPage();
    await direct.goto(stack.url + '/app/');
    for (const f of files) {
      const url = `${stack.url}/api/claude/vault/file?path=${encodeURIComponent(f.path)}`;
      const download = direct.waitForEvent('download', { timeout: 15000 }).catch(() => null);
      await direct.goto(url).catch(() => null); // a download aborts the navigation
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(await direct.evaluate(() => window.pwned), undefined, `${f.name} ran a script`);
      const got = await download;
      assert.ok(got, `${f.name} was shown, not downloaded`);
      assert.equal(got.suggestedFilename(), f.path.split('/').pop());
    }
    // Even a document the browser shows runs nothing: the sandboxing CSP
    // holds for every file.
    const shown = await direct.goto(`${stack.url}/api/claude/vault/file?path=welcome.md`);
    assert.match(shown.headers()['content-security-policy'], /^sandbox/);
    assert.equal(shown.headers()['x-content-type-options'], 'nosniff');
    await context.close();
    // In the notes panel they are offered as downloads only.
    await page.getByRole('button', { name: 'Notes', exact: true }).click();
    const panel = page.locator('#notes-panel');
    await panel.getByRole('button', { name: /attachments/ }).click();
    await panel.getByRole('button', { name: /\d{4}-\d\d/ }).click();
    await panel.getByRole('button', { name: /evil\.svg/ }).click();
    await panel.getByText(/is not shown here/).waitFor();
    await panel.getByRole('link', { name: 'Download it' }).waitFor();
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.equal(await page.locator('#notes-panel svg, #notes-panel iframe, #notes-panel object, #notes-panel embed').count(), 0);
    await panel.getByRole('button', { name: 'Close' }).click();
  });

  step('a phone is paired from the QR code and chats with its own token, until it is revoked', async () => {
    await page.getByRole('button', { name: 'Devices' }).click();
    await page.getByLabel('New device\'s name').fill('Pixel 8');
    await page.getByRole('button', { name: 'Add a device' }).click();
    await waitFor(page, () => document.getElementById('pairing-qr').complete && document.getElementById('pairing-qr').naturalWidth > 0, null, 'the QR code');
    await shot(page, '20-add-device');
    // The QR code as the phone's camera would read it.
    const pixels = await page.evaluate(() => {
      const img = document.getElementById('pairing-qr');
      const c = document.createElement('canvas');
      c.width = img.naturalWidth;
      c.height = img.naturalHeight;
      const g = c.getContext('2d');
      g.drawImage(img, 0, 0);
      return { w: c.width, h: c.height, data: Array.from(g.getImageData(0, 0, c.width, c.height).data) };
    });
    const qr = jsQR(Uint8ClampedArray.from(pixels.data), pixels.w, pixels.h);
    assert.ok(qr, 'the QR code reads');
    const code = await page.locator('#pairing-code').textContent();
    assert.equal(qr.data, stack.url + '/app/#pair=' + code, 'the QR code carries the server and the code shown');

    const phone = await browser.newContext({ viewport: { width: 390, height: 844 } });
    const p2 = await phone.newPage();
    p2.setDefaultTimeout(WAIT);
    await p2.goto(qr.data);
    await p2.getByRole('heading', { name: 'What can I help with?' }).waitFor();
    const auth = await p2.evaluate(() => JSON.parse(localStorage.getItem('major.auth')));
    assert.equal(auth.person, 'sebastian');
    assert.notEqual(auth.token, TOKEN, 'the phone has a token of its own');
    assert.equal(await p2.evaluate(() => location.hash), '', 'the code left the address');
    await send(p2, '[[say Hello from the paired phone]]');
    await waitReply(p2, 'Hello from the paired phone');
    await shot(p2, '21-paired-phone');

    // The code was for one device only.
    const again = await fetch(stack.url + '/api/claude/pair', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ code }) });
    assert.equal(again.status, 401);

    await page.getByRole('button', { name: 'Done' }).click();
    await page.getByRole('button', { name: 'Devices' }).click();
    const row = page.locator('.device[data-name="Pixel 8"]');
    await row.waitFor();
    await shot(page, '22-devices');
    await row.getByRole('button', { name: 'Revoke' }).click();
    await row.waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'Done' }).click();
    // The phone's next request is refused: it is back at the sign-in.
    await waitFor(p2, () => !document.getElementById('signin').hidden, null, 'the revoked phone to be signed out');
    await phone.close();
  });

  step('a pushed notification shows, and its button answers the question', async () => {
    const headers = { Authorization: 'Bearer ' + TOKEN, 'X-Notes-Person': 'sebastian', 'Content-Type': 'application/json' };
    const cfg = await (await fetch(stack.url + '/api/claude/push/config', { headers })).json();
    push.expect(cfg.vapid_public_key);
    // Chromium's own push service is out of reach here: the device is a
    // subscription of the test's push service, registered as the page
    // registers its own.
    const res = await fetch(stack.url + '/api/claude/devices', {
      method: 'POST', headers, body: JSON.stringify({ kind: 'webpush', subscription: push.subscribe(), name: 'e2e' }),
    });
    assert.equal(res.status, 201);
    const device = await res.json();
    // The second client, still open on the chat, would be watching it.
    await page2.context().close();
    try {
      await page.context().grantPermissions(['notifications'], { origin: stack.url });
      await page.locator(`.session[data-session-id="${sessionID}"]`).click();
      await waitIdle(page);
      // The app is installable: its manifest and worker are in place.
      const app = await page.evaluate(async () => {
        const reg = await navigator.serviceWorker.ready;
        const manifest = await (await fetch(document.querySelector('link[rel=manifest]').href)).json();
        return { scope: reg.scope, display: manifest.display, icons: manifest.icons.map((i) => i.sizes) };
      });
      assert.equal(app.scope, stack.url + '/app/');
      assert.equal(app.display, 'standalone');
      assert.ok(app.icons.includes('192x192') && app.icons.includes('512x512'), `icons ${app.icons}`);

      // The worker's registration, for the DevTools protocol, once its
      // version is activated (a push for a worker still activating can be
      // lost on a slow machine); its errors, for a failure's message.
      const cdp = await page.context().newCDPSession(page);
      const registered = new Promise((resolve) => cdp.on('ServiceWorker.workerRegistrationUpdated', ({ registrations }) => {
        const r = registrations.find((x) => x.scopeURL === app.scope && !x.isDeleted);
        if (r) resolve(r.registrationId);
      }));
      const workerLog = [];
      let activated;
      const active = new Promise((resolve) => { activated = resolve; });
      cdp.on('ServiceWorker.workerVersionUpdated', ({ versions }) => {
        for (const v of versions) {
          workerLog.push(`version ${v.versionId}: ${v.status}, ${v.runningStatus}`);
          if (v.status === 'activated') activated();
        }
      });
      cdp.on('ServiceWorker.workerErrorReported', ({ errorMessage }) => workerLog.push(`error: ${errorMessage.errorMessage}`));
      await cdp.send('ServiceWorker.enable');
      const registrationId = await registered;
      await active;

      // The person switches to another tab: the page tells the server.
      const hidden = page.waitForResponse((r) => r.url().endsWith('/api/claude/presence') && (r.request().postData() || '').includes('false'));
      await page.evaluate(() => {
        Object.defineProperty(document, 'visibilityState', { value: 'hidden', configurable: true });
        document.dispatchEvent(new Event('visibilitychange'));
      });
      assert.equal((await (await hidden).json()).known, true, 'the server knows the page');

      // A question waits, nobody watching: the server pushes it, encrypted
      // for the subscription and signed with its VAPID key.
      await fetch(stack.url + '/api/claude/sessions/' + sessionID + '/messages', { method: 'POST', headers, body: JSON.stringify({ message: '[[ask]]' }) });
      await page.locator('.card.question').waitFor();
      const text = await push.next(WAIT);
      const payload = JSON.parse(text);
      assert.equal(payload.type, 'question');
      assert.equal(payload.session_id, sessionID);
      assert.deepEqual(payload.actions.map((a) => a.label), ['Red', 'Blue']);

      // The browser's push service delivers it to the worker, which shows it.
      const deliver = () => cdp.send('ServiceWorker.deliverPushMessage', { origin: new URL(stack.url).origin, registrationId, data: text });
      await deliver();
      const shownNotes = () => page.evaluate(async () => (await (await navigator.serviceWorker.ready).getNotifications())
        .map((n) => ({ title: n.title, body: n.body, actions: n.actions.map((a) => a.title), tag: n.tag })));
      let shown = [];
      for (let i = 0; i < 400 && !shown.length; i++) {
        shown = await shownNotes();
        if (shown.length) break;
        // A push service delivers again what was not taken; so does this
        // test, once, after 10 s (the notification's tag keeps it one).
        if (i === 200) {
          console.log('e2e: the push delivered again after 10 s; the worker: ' + workerLog.join('; '));
          await deliver();
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.equal(shown.length, 1, `the worker shows the notification (the worker: ${workerLog.join('; ')})`);
      assert.match(shown[0].body, /^Which color\?\n• Red/);
      assert.equal(shown[0].title, payload.title);
      assert.deepEqual(shown[0].actions, ['Red', 'Blue']);

      // The person presses "Blue": the worker's notificationclick, as the
      // browser dispatches it for a button.
      const worker = page.context().serviceWorkers().find((w) => w.url().endsWith('/app/sw.js'));
      assert.ok(worker, 'the service worker runs');
      await worker.evaluate(async () => {
        const [n] = await self.registration.getNotifications();
        self.dispatchEvent(new NotificationEvent('notificationclick', { notification: n, action: '1' }));
      });
      await waitReply(page, '"Which color?"="Blue"');
      assert.equal(await page.locator('.card').count(), 0, 'the card left the page');
      // In place of the question, what came of the answer.
      for (let i = 0; i < 200 && !(shown.length === 1 && shown[0].body === 'Answered: Blue'); i++) {
        shown = await shownNotes();
        await new Promise((r) => setTimeout(r, 50));
      }
      assert.deepEqual(shown.map((n) => n.body), ['Answered: Blue']);
      await waitIdle(page);

      // The settings page lists the device and the person's choices.
      await page.getByRole('button', { name: 'Notifications' }).click();
      await page.locator('#settings-view .device', { hasText: 'e2e' }).waitFor();
      assert.equal(await page.locator('#events input:checked').count(), 6, 'every event is chosen');
      await accessible(page, 'the notification settings');
      // When the browser offers to install the app, the page offers it too.
      assert.equal(await page.getByRole('button', { name: 'Install the app' }).isVisible(), false);
      await page.evaluate(() => {
        const offer = new Event('beforeinstallprompt', { cancelable: true });
        offer.prompt = async () => { window.installAsked = true; };
        window.dispatchEvent(offer);
      });
      await page.getByRole('button', { name: 'Install the app' }).click();
      assert.equal(await page.evaluate(() => window.installAsked), true, 'the browser was asked to install the app');
      await page.getByRole('button', { name: 'Install the app' }).waitFor({ state: 'hidden' });
      await shot(page, '20-notifications');
      await page.getByRole('button', { name: 'Back to the chat' }).click();
      await page.locator('#settings-view').waitFor({ state: 'hidden' });
    } finally {
      await page.evaluate(() => {
        delete document.visibilityState;
        document.dispatchEvent(new Event('visibilitychange'));
      });
      await fetch(stack.url + '/api/claude/devices/' + device.id, { method: 'DELETE', headers });
    }
  });

  // The elements that reach past the window's right edge, for a failure's message.
  const widest = (p) => p.evaluate(() => [...document.querySelectorAll('body *')]
    .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && e.getClientRects().length)
    .slice(0, 5).map((e) => `${e.tagName.toLowerCase()}${e.id ? '#' + e.id : ''}.${[...e.classList].join('.')} (${Math.round(e.getBoundingClientRect().right)}px)`).join(', '));

  step('phone width (dark): one column, chats in a drawer', async () => {
    const phone = await newClient({ width: 390, height: 844 }, stack.url, 'dark');
    await signIn(phone);
    await phone.getByRole('heading', { name: 'What can I help with?' }).waitFor();
    await phone.getByRole('button', { name: 'Show chats' }).click();
    await phone.locator(`.session[data-session-id="${sessionID}"]`).click();
    await waitFor(phone, () => document.querySelectorAll('#transcript .msg').length > 4 && !document.querySelector('#transcript .running'), null, 'the chat on the phone');
    await settled(phone);
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `no sideways scrolling (${overflow}px too wide: ${await widest(phone)})`);
    assert.equal(await phone.locator('#sidebar').isVisible(), false, 'the drawer closed after choosing a chat');
    // The chat gets the screen: its settings wait behind a button, and
    // its title is not cut to a few letters.
    assert.equal(await phone.locator('#controls').isVisible(), false, 'the chat\'s settings are folded away');
    const titleWidth = await phone.locator('#chat-title').evaluate((e) => e.getBoundingClientRect().width);
    assert.ok(titleWidth >= 200, `the title has room: ${titleWidth}px`);
    await shot(phone, '13-phone');
    await phone.getByRole('button', { name: 'Chat settings' }).click();
    await phone.getByLabel('Model', { exact: true }).waitFor();
    assert.equal(await phone.getByRole('button', { name: 'Fork chat' }).isVisible(), true);
    assert.ok(await phone.locator('#spend').isVisible(), 'the spending is in the menu');
    await accessible(phone, 'the chat on a phone with its settings open');
    await shot(phone, '30-phone-chat-settings');
    await phone.keyboard.press('Escape');
    await phone.locator('#controls').waitFor({ state: 'hidden' });
    await phone.getByRole('button', { name: 'Show chats' }).click();
    await phone.locator('#sidebar').waitFor({ state: 'visible' });
    await settled(phone);
    // In the drawer, a chat's options and the search work as on a laptop,
    // and titles keep most of their width.
    const row = phone.locator(`.session-row[data-session-id="${sessionID}"]`);
    const width = await row.locator('.session-title').evaluate((e) => e.getBoundingClientRect().width);
    assert.ok(width >= 180, `the chat's title has room in the drawer: ${width}px`);
    await row.locator('.session-more').click();
    await row.getByRole('button', { name: 'Rename' }).waitFor();
    await shot(phone, '14-phone-drawer');
    await phone.keyboard.press('Escape');
    await phone.locator('#sidebar').waitFor({ state: 'visible' });
    await phone.getByRole('searchbox', { name: 'Search chats' }).fill('Greetings');
    await waitFor(phone, (id) => [...document.querySelectorAll('#sessions > li')].some((e) => e.dataset.sessionId === id), sessionID, 'the chat found on the phone');
    await phone.getByRole('searchbox', { name: 'Search chats' }).fill('');
    // The account's buttons are at the drawer's foot on a phone.
    await phone.locator('#sidebar').getByRole('button', { name: 'Notifications' }).click();
    await phone.locator('#settings-view').waitFor();
    await phone.locator('#sidebar').waitFor({ state: 'hidden' });
    await phone.getByRole('button', { name: 'Back to the chat' }).click();
    // The usage page fits a phone too.
    await phone.getByRole('button', { name: 'Show chats' }).click();
    await phone.locator('#sidebar').getByRole('button', { name: 'Usage' }).click();
    await phone.locator('#usage-cost svg').waitFor();
    const overflow2 = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow2 <= 0, `the usage page does not scroll sideways (${overflow2}px: ${await widest(phone)})`);
    await shot(phone, '31-phone-usage');
    await phone.getByRole('button', { name: 'Back to the chat' }).click();
    await phone.context().close();
  });

  step('on a phone: a question, a post to approve, the queue, the notes, a photo, a diff and the terminal fit the screen and work', async () => {
    const phone = await newClient({ width: 390, height: 844 }, stack.url);
    await signIn(phone);
    await phone.getByRole('heading', { name: 'What can I help with?' }).waitFor();
    const fits = async (what) => {
      const over = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      assert.ok(over <= 0, `${what} scrolls sideways on a phone (${over}px: ${await widest(phone)})`);
    };
    await send(phone, '[[ask]]');
    const question = phone.locator('.card.question');
    await question.getByText('Which color?').waitFor();
    await fits('a question card');
    await shot(phone, '32-phone-question');
    await question.getByRole('button', { name: /Blue/ }).click();
    await waitReply(phone, '"Which color?"="Blue"');
    await waitIdle(phone);

    await send(phone, '[[tool mcp__linkedin__linkedin_post {"text":"Notes on notes, from a phone"}]]');
    const card = phone.locator('.card.permission');
    await card.getByRole('heading', { name: 'Publish on LinkedIn?' }).waitFor();
    assert.ok(await card.locator('.card-draft').isVisible(), 'the words are shown on a phone');
    await fits('a permission card');
    await shot(phone, '33-phone-permission');
    await card.getByRole('button', { name: 'Deny' }).click();
    await waitReply(phone, 'Denied: Publish on LinkedIn.');
    await waitIdle(phone);

    await send(phone, '[[slow 100 100]]');
    await phone.getByRole('button', { name: 'Send now' }).waitFor();
    const box = phone.getByLabel('Message');
    await box.fill('queued on a phone');
    await box.press('Enter');
    const queued = phone.locator('#queue li', { hasText: 'queued on a phone' });
    await queued.waitFor();
    await fits('the queue');
    await shot(phone, '34-phone-queue');
    await queued.getByRole('button', { name: /Cancel/ }).click();
    await queued.waitFor({ state: 'detached' });
    await phone.getByRole('button', { name: 'Interrupt' }).click();
    await waitIdle(phone);

    await phone.getByRole('button', { name: 'Chat settings' }).click();
    await phone.getByRole('button', { name: 'Notes', exact: true }).click();
    await phone.locator('#notes-panel').getByRole('button', { name: /welcome\.md/ }).click();
    await phone.locator('#notes-panel h3', { hasText: 'Welcome' }).waitFor();
    await fits('the notes panel');
    await shot(phone, '35-phone-notes');
    await phone.locator('#notes-panel').getByRole('button', { name: 'Close' }).click();

    // A photo from the phone, and what a turn changed, with its diff.
    await phone.locator('#attach-files').setInputFiles({ name: 'receipt.png', mimeType: 'image/png', buffer: PNG });
    await phone.locator('#tray .tray-item').getByText('receipt.png').waitFor();
    await fits('the attachment tray');
    await send(phone, '[[blocks]]');
    await waitReply(phone, 'image image/png');
    await waitIdle(phone);
    await fits('a message with a thumbnail');
    const note = path.join(stack.tmp, 'vault', 'sebastian', 'phone-note.md');
    await send(phone, `[[tool Write {"file_path":"${note}","content":"written from a phone\\n"}]]`);
    await waitReply(phone, 'Changed: 1 note');
    await waitIdle(phone);
    await phone.locator('#transcript .msg.assistant').last().getByRole('button', { name: 'Changed: 1 note' }).click();
    const dialog = phone.locator('#diff-dialog');
    await dialog.getByText('+written from a phone').waitFor();
    await fits('the diff');
    await shot(phone, '36-phone-diff');
    await dialog.getByRole('button', { name: 'Close' }).click();

    // The terminal, from the chat's menu.
    await phone.getByRole('button', { name: 'Chat settings' }).click();
    await phone.getByRole('button', { name: 'Terminal', exact: true }).click();
    await waitFor(phone, () => (document.querySelector('#terminal .xterm-rows')?.textContent || '').includes('accept edits on'), null, "the CLI's screen on a phone");
    await fits('the terminal');
    await shot(phone, '37-phone-terminal');
    await phone.getByRole('button', { name: 'Back to the chat' }).click();
    await phone.locator('#terminal-view').waitFor({ state: 'hidden' });
    await phone.context().close();
  });

  step('no page loaded anything from another origin', async () => {
    assert.deepEqual(foreign, []);
  });
});
