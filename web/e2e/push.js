// A Web Push service on loopback for the browser test: it makes
// subscriptions (a P-256 key pair and auth secret, as a browser's
// PushManager does), and for each message the server sends it checks the
// VAPID signature (RFC 8292) against the server's key and decrypts the
// payload with the subscription's private key (RFC 8291). The test then
// hands the plain payload to the browser's service worker through the
// DevTools protocol, as the browser's own push service would deliver it.

import http from 'node:http';
import crypto from 'node:crypto';

const b64url = (buf) => Buffer.from(buf).toString('base64url');

// checkVAPID verifies "vapid t=<JWT>, k=<key>": an ES256 JWT signed with
// k for audience, not expired, with a subject; k must be expect.
function checkVAPID(header, audience, expect) {
  const m = /^vapid t=([^,\s]+),\s*k=([A-Za-z0-9_-]+)$/.exec(header || '');
  if (!m) throw new Error(`authorization ${header} is not vapid`);
  const [, token, key] = m;
  if (key !== expect) throw new Error('signed with another key than the server\'s');
  const raw = Buffer.from(key, 'base64url');
  const pub = crypto.createPublicKey({ key: { kty: 'EC', crv: 'P-256', x: b64url(raw.subarray(1, 33)), y: b64url(raw.subarray(33, 65)) }, format: 'jwk' });
  const [head, claims, sig] = token.split('.');
  if (JSON.parse(Buffer.from(head, 'base64url')).alg !== 'ES256') throw new Error('JWT is not ES256');
  const ok = crypto.verify('sha256', Buffer.from(head + '.' + claims), { key: pub, dsaEncoding: 'ieee-p1363' }, Buffer.from(sig, 'base64url'));
  if (!ok) throw new Error('JWT signature does not verify with k');
  const c = JSON.parse(Buffer.from(claims, 'base64url'));
  const now = Date.now() / 1000;
  if (c.aud !== audience) throw new Error(`aud ${c.aud}, want ${audience}`);
  if (!(c.exp > now && c.exp <= now + 86400)) throw new Error(`exp ${c.exp} is not within a day`);
  if (!/^(mailto:|https:)/.test(c.sub || '')) throw new Error(`sub ${c.sub}`);
}

// decrypt opens an aes128gcm body (one record) for a subscription.
function decrypt(body, sub) {
  const salt = body.subarray(0, 16);
  const idlen = body[20];
  const senderKey = body.subarray(21, 21 + idlen);
  const ct = body.subarray(21 + idlen);
  const shared = sub.ecdh.computeSecret(senderKey);
  const keyInfo = Buffer.concat([Buffer.from('WebPush: info\0'), sub.ecdh.getPublicKey(), senderKey]);
  const ikm = Buffer.from(crypto.hkdfSync('sha256', shared, sub.auth, keyInfo, 32));
  const cek = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: aes128gcm\0'), 16));
  const nonce = Buffer.from(crypto.hkdfSync('sha256', ikm, salt, Buffer.from('Content-Encoding: nonce\0'), 12));
  const d = crypto.createDecipheriv('aes-128-gcm', cek, nonce);
  d.setAuthTag(ct.subarray(ct.length - 16));
  const plain = Buffer.concat([d.update(ct.subarray(0, ct.length - 16)), d.final()]);
  let end = plain.length - 1;
  while (end >= 0 && plain[end] === 0) end--;
  if (end < 0 || plain[end] !== 2) throw new Error('no last-record delimiter');
  return plain.subarray(0, end).toString('utf8');
}

// startPushService starts the service; next() resolves with the next
// message {text} (or rejects with why it was refused).
export async function startPushService() {
  const subs = new Map();
  const waiting = [];
  const got = [];
  let expect = '';
  let url = '';
  const deliver = (m) => {
    const w = waiting.shift();
    if (w) w(m);
    else got.push(m);
  };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const sub = subs.get(req.url.replace(/^\/push\//, ''));
      try {
        if (req.method !== 'POST' || !sub) throw new Error('no such subscription');
        if (req.headers['content-encoding'] !== 'aes128gcm') throw new Error('not aes128gcm');
        checkVAPID(req.headers.authorization, url, expect);
        deliver({ text: decrypt(Buffer.concat(chunks), sub) });
        res.writeHead(201).end();
      } catch (err) {
        deliver({ error: err });
        res.writeHead(400).end();
      }
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    // expect sets the server's VAPID public key (base64url).
    expect(key) {
      expect = key;
    },
    subscribe() {
      const ecdh = crypto.createECDH('prime256v1');
      ecdh.generateKeys();
      const auth = crypto.randomBytes(16);
      const id = b64url(crypto.randomBytes(9));
      subs.set(id, { ecdh, auth });
      return { endpoint: `${url}/push/${id}`, keys: { p256dh: b64url(ecdh.getPublicKey()), auth: b64url(auth) } };
    },
    async next(ms) {
      const m = got.length ? got.shift() : await new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no push within ${ms} ms`)), ms);
        waiting.push((v) => {
          clearTimeout(t);
          resolve(v);
        });
      });
      if (m.error) throw m.error;
      return m.text;
    },
    close() {
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
