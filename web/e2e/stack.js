// The real server stack for the browser tests: the scripted model, and
// `major serve` on a fresh vault talking to it through the pinned Claude
// Code CLI. Every process started here is in its own process group and is
// killed by stop(), or at the latest when this process exits.

import { spawn, execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync, mkdtempSync, rmSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const WEB = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
export const ROOT = path.resolve(WEB, '..');
export const TOKEN = 'e2e-token';

const started = new Set();

// On any exit, kill what is still running; stop() normally did already.
process.on('exit', () => {
  for (const p of started) killGroup(p, 'SIGKILL');
});
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(sig, () => process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1)));
}

// track remembers a started process group, also in $MAJOR_E2E_PIDS so
// e2e/run.sh can kill it even if this process is killed outright.
function track(p) {
  started.add(p);
  if (process.env.MAJOR_E2E_PIDS && p.pid) appendFileSync(process.env.MAJOR_E2E_PIDS, p.pid + '\n');
}

function killGroup(p, signal) {
  try {
    process.kill(-p.pid, signal);
  } catch {
    // already gone
  }
}

function exited(p) {
  return p.exitCode !== null || p.signalCode !== null;
}

function waitExit(p, ms) {
  if (exited(p)) return Promise.resolve(true);
  return new Promise((resolve) => {
    const t = setTimeout(() => resolve(false), ms);
    p.once('exit', () => {
      clearTimeout(t);
      resolve(true);
    });
  });
}

// run runs a command to completion within ms, failing with its output.
function run(cmd, args, opts, ms) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    track(p);
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.stderr.on('data', (d) => (out += d));
    const t = setTimeout(() => {
      killGroup(p, 'SIGKILL');
      reject(new Error(`${cmd} ${args.join(' ')} took over ${ms} ms:\n${out}`));
    }, ms);
    p.on('error', (err) => {
      clearTimeout(t);
      started.delete(p);
      reject(err);
    });
    p.on('exit', (code) => {
      clearTimeout(t);
      started.delete(p);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.join(' ')} exited ${code}:\n${out}`));
    });
  });
}

// daemon starts a long-running process, its output teed to a log file, and
// resolves with the first match of pattern in its stdout.
function daemon(name, cmd, args, opts, pattern, ms, logFile) {
  return new Promise((resolve, reject) => {
    const p = spawn(cmd, args, { ...opts, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    track(p);
    const log = createWriteStream(logFile);
    let out = '';
    let done = false;
    const finish = (err, value) => {
      if (done) return;
      done = true;
      clearTimeout(t);
      if (err) reject(err);
      else resolve({ proc: p, match: value });
    };
    const t = setTimeout(() => finish(new Error(`${name} did not start within ${ms} ms:\n${out.slice(-4000)}`)), ms);
    p.stdout.on('data', (d) => {
      log.write(d);
      if (done) return;
      out += d;
      const m = pattern.exec(out);
      if (m) finish(null, m);
    });
    p.stderr.on('data', (d) => {
      log.write(d);
      if (!done) out += d;
    });
    p.on('error', (err) => finish(err));
    p.on('exit', (code, sig) => {
      started.delete(p);
      log.end();
      finish(new Error(`${name} exited (${code ?? sig}) before it was ready:\n${out.slice(-4000)}`));
    });
  });
}

// claudeBinary is the pinned CLI that scripts/install-claude.sh installs.
export function claudeBinary() {
  const bin = process.env.MAJOR_CLAUDE || path.join(ROOT, '.tools/claude/node_modules/.bin/claude');
  if (!existsSync(bin)) throw new Error(`no Claude Code CLI at ${bin}: run bash scripts/install-claude.sh`);
  return bin;
}

// startStack builds and starts everything, major with extra flags; it
// returns {url, tmp, stop}.
export async function startStack(extra = []) {
  const tmp = mkdtempSync(path.join(tmpdir(), 'major-web-e2e-'));
  const procs = [];
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    for (const p of [...procs].reverse()) {
      if (exited(p)) continue;
      // major ends its CLI processes when it shuts down: let it.
      killGroup(p, 'SIGTERM');
      if (!(await waitExit(p, 20000))) {
        killGroup(p, 'SIGKILL');
        await waitExit(p, 5000);
      }
      started.delete(p);
    }
    const left = strays(tmp);
    for (const pid of left) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone meanwhile
      }
    }
    if (left.length) console.error(`killed ${left.length} process(es) still running from ${tmp} after shutdown`);
    if (!process.env.MAJOR_E2E_KEEP) rmSync(tmp, { recursive: true, force: true });
  };
  try {
    const bin = path.join(tmp, 'bin');
    const build = { cwd: ROOT, env: { ...process.env, CGO_ENABLED: process.env.CGO_ENABLED || '0' } };
    await run('go', ['build', '-o', path.join(bin, 'major'), './cmd/major'], build, 600000);
    await run('go', ['build', '-o', path.join(bin, 'scriptedmodel'), './cmd/scriptedmodel'], build, 600000);
    const claude = claudeBinary();

    const vault = path.join(tmp, 'vault');
    for (const person of ['sebastian', 'petra']) {
      mkdirSync(path.join(vault, person), { recursive: true });
      writeFileSync(path.join(vault, person, 'welcome.md'), `# Welcome\n\nThe notes of ${person}.\n`);
    }
    const git = (...args) => execFileSync('git', ['-C', vault, '-c', 'user.name=major', '-c', 'user.email=major@localhost', ...args], { stdio: 'pipe', timeout: 30000 });
    git('init', '-q', '-b', 'main');
    git('add', '-A');
    git('commit', '-qm', 'Test vault');
    const auth = path.join(tmp, 'auth.json');
    writeFileSync(auth, JSON.stringify({ tokens: { [TOKEN]: ['sebastian', 'petra'] } }));
    const home = path.join(tmp, 'home');
    mkdirSync(home);

    const model = await daemon('scripted model', path.join(bin, 'scriptedmodel'), ['--addr', '127.0.0.1:0'], { cwd: tmp },
      /listening on (http:\/\/\S+)/, 20000, path.join(tmp, 'scriptedmodel.log'));
    procs.push(model.proc);

    const env = {
      PATH: process.env.PATH,
      HOME: home,
      ANTHROPIC_BASE_URL: model.match[1],
      ANTHROPIC_API_KEY: 'x',
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    };
    const major = await daemon('major serve', path.join(bin, 'major'), [
      'serve', '--addr', '127.0.0.1:0', '--vault-root', vault, '--state-dir', path.join(tmp, 'state'),
      '--auth-file', auth, '--claude', claude, ...extra,
    ], { cwd: ROOT, env }, /"(?:message|msg)":"major is serving"/, 60000, path.join(tmp, 'major.log'));
    procs.push(major.proc);
    const line = major.match.input.split('\n').find((l) => l.includes('"major is serving"'));
    const url = JSON.parse(line).addr;

    const deadline = Date.now() + 30000;
    for (;;) {
      const res = await fetch(url + '/readyz').catch(() => null);
      if (res && res.ok) break;
      if (Date.now() > deadline) throw new Error('major never became ready');
      await new Promise((r) => setTimeout(r, 200));
    }
    return { url, tmp, stop, log: () => readLog(path.join(tmp, 'major.log')) };
  } catch (err) {
    await stop();
    throw err;
  }
}

function readLog(file) {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

// strays are processes whose command line names the test's temp folder
// (the CLI gets the vault path in its arguments).
function strays(tmp) {
  const out = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${name}/cmdline`, 'utf8').includes(tmp)) out.push(Number(name));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
