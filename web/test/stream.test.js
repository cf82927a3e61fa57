import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { EventStream, LineDecoder } from '../js/stream.js';

test('LineDecoder joins lines and characters split across chunks', () => {
  const d = new LineDecoder();
  const bytes = new TextEncoder().encode('{"a":"é"}\n{"b":2}\n{"c"');
  const out = [];
  for (let i = 0; i < bytes.length; i++) out.push(...d.push(bytes.subarray(i, i + 1)));
  assert.deepEqual(out, ['{"a":"é"}', '{"b":2}']);
  assert.deepEqual(d.end(), ['{"c"']);
});

// server answers each events request with handler(after, req, res, n).
async function serve(handler) {
  const requests = [];
  const srv = http.createServer((req, res) => {
    const after = Number(new URL(req.url, 'http://x').searchParams.get('after'));
    requests.push({ after, auth: req.headers.authorization });
    handler(after, res, requests.length);
  });
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const base = `http://127.0.0.1:${srv.address().port}`;
  return {
    requests,
    url: (after) => `${base}/events?after=${after}`,
    close: () => {
      srv.closeAllConnections();
      return new Promise((r) => srv.close(r));
    },
  };
}

const line = (o) => JSON.stringify(o) + '\n';

// collect runs a stream until done() says so (or 5 s pass).
function collect(srv, done, extra = {}) {
  return new Promise((resolve, reject) => {
    const got = [];
    const states = [];
    const s = new EventStream({
      url: srv.url,
      headers: () => ({ Authorization: 'Bearer t' }),
      minDelay: 10,
      maxDelay: 50,
      onEvent: (ev, info) => {
        got.push(info.again ? `again:${ev.type}:${ev.seq}` : `${ev.type}:${ev.seq}`);
        if (done(got)) {
          s.stop();
          clearTimeout(limit);
          resolve({ got, states });
        }
      },
      onState: (st) => states.push(st),
      ...extra,
    });
    const limit = setTimeout(() => {
      s.stop();
      reject(new Error('gave up; got ' + JSON.stringify(got)));
    }, 5000);
    s.start();
  });
}

test('after a drop it re-attaches after the last seq: nothing twice, nothing lost', async () => {
  const srv = await serve((after, res, n) => {
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    if (n === 1) {
      // Three events, half of a fourth, then the connection dies.
      res.write(line({ seq: 1, type: 'turn_start' }) + line({ type: 'ping' }) + line({ seq: 2, type: 'question', request_id: 'r' }) + line({ seq: 3, type: 'text', delta: 'a' }) + '{"seq":4,"ty');
      setTimeout(() => res.socket.destroy(), 20);
      return;
    }
    // The open question comes again first, then the replay after 3.
    res.write(line({ seq: 2, type: 'question', request_id: 'r' }) + line({ seq: 1, type: 'turn_start' }) + line({ seq: 4, type: 'text', delta: 'b' }) + line({ seq: 5, type: 'done' }));
  });
  try {
    const { got, states } = await collect(srv, (g) => g.includes('done:5'));
    assert.deepEqual(got, ['turn_start:1', 'question:2', 'text:3', 'again:question:2', 'text:4', 'done:5']);
    assert.deepEqual(srv.requests.map((r) => r.after), [0, 3]);
    assert.equal(srv.requests[1].auth, 'Bearer t');
    assert.ok(states.includes('retrying'), 'it said it was reconnecting: ' + states);
  } finally {
    await srv.close();
  }
});

test('a connection that goes silent is dropped and re-attached', async () => {
  const srv = await serve((after, res, n) => {
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    if (n === 1) res.write(line({ seq: 1, type: 'text', delta: 'a' })); // then nothing, not even pings
    else res.write(line({ seq: 2, type: 'done' }));
  });
  try {
    const { got } = await collect(srv, (g) => g.includes('done:2'), { idleTimeout: 200 });
    assert.deepEqual(got, ['text:1', 'done:2']);
    assert.deepEqual(srv.requests.map((r) => r.after), [0, 1]);
  } finally {
    await srv.close();
  }
});

test('410 Gone starts over from seq 0 and says so', async () => {
  let resets = 0;
  const srv = await serve((after, res, n) => {
    if (n === 1) {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.end(line({ seq: 7, type: 'text', delta: 'x' }));
    } else if (n === 2) {
      res.writeHead(410, { 'Content-Type': 'application/json' });
      res.end('{"error":"gone"}');
    } else {
      res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
      res.write(line({ seq: 1, type: 'turn_start' }) + line({ seq: 7, type: 'text', delta: 'x' }) + line({ seq: 8, type: 'done' }));
    }
  });
  try {
    const { got } = await collect(srv, (g) => g.includes('done:8'), { onReset: () => resets++ });
    assert.deepEqual(got, ['text:7', 'turn_start:1', 'text:7', 'done:8']);
    assert.deepEqual(srv.requests.map((r) => r.after), [0, 7, 0]);
    assert.equal(resets, 1);
  } finally {
    await srv.close();
  }
});

test('401 and 404 stop the stream instead of retrying', async () => {
  for (const status of [401, 404]) {
    const srv = await serve((after, res) => {
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ error: 'nope ' + status }));
    });
    try {
      let limit;
      const err = await new Promise((resolve, reject) => {
        const s = new EventStream({ url: srv.url, headers: () => ({}), onEvent: () => {}, onFatal: resolve, minDelay: 10 });
        limit = setTimeout(() => reject(new Error('no fatal error')), 3000);
        s.start();
      });
      clearTimeout(limit);
      assert.equal(err.status, status);
      assert.equal(err.message, 'nope ' + status);
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(srv.requests.length, 1, 'no retry');
    } finally {
      await srv.close();
    }
  }
});

test('a 5xx is retried with backoff', async () => {
  const srv = await serve((after, res, n) => {
    if (n < 3) {
      res.writeHead(503, { 'Content-Type': 'application/json' });
      res.end('{"error":"busy"}');
      return;
    }
    res.writeHead(200, { 'Content-Type': 'application/x-ndjson' });
    res.write(line({ seq: 1, type: 'done' }));
  });
  try {
    const { got } = await collect(srv, (g) => g.includes('done:1'));
    assert.deepEqual(got, ['done:1']);
    assert.equal(srv.requests.length, 3);
  } finally {
    await srv.close();
  }
});
