import { test } from 'node:test';
import assert from 'node:assert/strict';

import { parse, inline, safeHref, textOf } from '../js/markdown.js';

// shape is a compact view of a node tree: tags and text.
function shape(nodes) {
  return nodes.map((n) => {
    if (n.text !== undefined) return n.text;
    if (n.tag === 'br') return 'br';
    const o = { [n.tag]: shape(n.children) };
    if (n.href) o.href = n.href;
    return o;
  });
}

test('inline formatting', () => {
  const cases = [
    ['plain text', ['plain text']],
    ['a **bold** word', ['a ', { strong: ['bold'] }, ' word']],
    ['an *em* and _em_ word', ['an ', { em: ['em'] }, ' and ', { em: ['em'] }, ' word']],
    ['snake_case_name stays', ['snake_case_name stays']],
    ['2 * 3 * 4', ['2 * 3 * 4']],
    ['`a *b* <c>`', [{ code: ['a *b* <c>'] }]],
    ['[site](https://example.org/x)', [{ a: ['site'], href: 'https://example.org/x' }]],
    ['see https://example.org/a.', ['see ', { a: ['https://example.org/a'], href: 'https://example.org/a' }, '.']],
    ['**unclosed bold', ['**unclosed bold']],
  ];
  for (const [src, want] of cases) assert.deepEqual(shape(inline(src)), want, src);
});

test('markup in the text stays text', () => {
  const src = '<img src=x onerror=alert(1)> <script>alert(2)</script> &amp;';
  assert.deepEqual(shape(parse(src)), [{ p: [src] }]);
});

test('only http(s) and mailto links become links', () => {
  for (const bad of ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', 'data:text/html,x', 'vbscript:x', '//evil.example', '/relative']) {
    assert.equal(safeHref(bad), '', bad);
    const nodes = inline(`[x](${bad})`);
    assert.ok(nodes.every((n) => n.tag !== 'a'), bad);
    assert.equal(textOf(nodes), `[x](${bad})`);
  }
  assert.equal(safeHref('mailto:a@b.c'), 'mailto:a@b.c');
});

test('blocks', () => {
  const src = [
    '# Title',
    'line one',
    'line two',
    '',
    '- a',
    '* b',
    '',
    '3. three',
    '4. four',
    '',
    '> quoted **x**',
    '',
    '```js',
    'let x = "<b>";',
    '',
    '```',
    '---',
  ].join('\n');
  const blocks = parse(src);
  assert.deepEqual(shape(blocks), [
    { h3: ['Title'] },
    { p: ['line one', 'br', 'line two'] },
    { ul: [{ li: ['a'] }, { li: ['b'] }] },
    { ol: [{ li: ['three'] }, { li: ['four'] }] },
    { blockquote: [{ p: ['quoted ', { strong: ['x'] }] }] },
    { pre: [{ code: ['let x = "<b>";\n'] }] },
    { hr: [] },
  ]);
  assert.equal(blocks[3].start, 3);
});

test('an unterminated code fence (still streaming) keeps its text', () => {
  assert.deepEqual(shape(parse('before\n```\ncode so far')), [{ p: ['before'] }, { pre: [{ code: ['code so far'] }] }]);
});

test('tables', () => {
  const src = ['| Day | Cost |', '|:----|-----:|', '| Mon | **$1** |', '| Tue | a \\| b |', '', 'after'].join('\n');
  const nodes = parse(src);
  assert.equal(nodes.length, 2);
  const [table, after] = nodes;
  assert.equal(table.tag, 'table');
  assert.deepEqual(shape(table.children), [
    { thead: [{ tr: [{ th: ['Day'] }, { th: ['Cost'] }] }] },
    { tbody: [{ tr: [{ td: ['Mon'] }, { td: [{ strong: ['$1'] }] }] }, { tr: [{ td: ['Tue'] }, { td: ['a | b'] }] }] },
  ]);
  assert.deepEqual(table.children[0].children[0].children.map((c) => c.align), ['left', 'right']);
  assert.deepEqual(shape([after]), [{ p: ['after'] }]);
  // A pipe in a paragraph without a rule under it is text.
  assert.deepEqual(shape(parse('a | b\nc')), [{ p: ['a | b', 'br', 'c'] }]);
});

test('task lists', () => {
  const nodes = parse('- [ ] milk\n- [x] eggs\n- plain');
  assert.deepEqual(shape(nodes), [{ ul: [{ li: ['milk'] }, { li: ['eggs'] }, { li: ['plain'] }] }]);
  assert.deepEqual(nodes[0].children.map((li) => li.checked), [false, true, undefined]);
});
