// A small Markdown subset for the assistant's replies: paragraphs with
// line breaks, headings, lists (with task items), quotes, rules, tables,
// fenced and inline code, bold, italics and http(s)/mailto links.
//
// parse builds a plain tree and render turns it into DOM nodes with
// createElement and createTextNode only: the model's text never reaches
// innerHTML, so nothing in it can become markup or script. Anything the
// parser does not understand stays literal text.

// A node is {tag, children, href?, start?, align?, checked?} for an
// element, {text} for text, or {tag: 'br'}. A task item is an li with
// checked true or false.

const SAFE_URL = /^(https?:\/\/|mailto:)[^\s]+$/i;

// safeHref returns url when it is an http(s) or mailto address, else "".
export function safeHref(url) {
  return SAFE_URL.test(url) ? url : '';
}

// parse turns Markdown text into a list of block nodes.
export function parse(src) {
  const lines = String(src).replace(/\r\n?/g, '\n').split('\n');
  const blocks = [];
  let para = [];
  const flushPara = () => {
    if (para.length) {
      const children = [];
      para.forEach((line, i) => {
        if (i > 0) children.push({ tag: 'br' });
        children.push(...inline(line));
      });
      blocks.push({ tag: 'p', children });
      para = [];
    }
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = /^\s*(```|~~~)\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      flushPara();
      const body = [];
      i++;
      while (i < lines.length && !new RegExp('^\\s*' + fence[1] + '\\s*$').test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      blocks.push({ tag: 'pre', children: [{ tag: 'code', children: [{ text: body.join('\n') }] }] });
      continue;
    }
    if (/^\s*$/.test(line)) {
      flushPara();
      continue;
    }
    const heading = /^(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      flushPara();
      const level = Math.min(6, heading[1].length + 2);
      blocks.push({ tag: 'h' + level, children: inline(heading[2]) });
      continue;
    }
    if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flushPara();
      blocks.push({ tag: 'hr', children: [] });
      continue;
    }
    if (isTableRow(line) && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      flushPara();
      const align = cells(lines[i + 1]).map((c) => (/^:-+:$/.test(c) ? 'center' : /-:$/.test(c) ? 'right' : /^:-/.test(c) ? 'left' : ''));
      const row = (l, tag) => ({
        tag: 'tr',
        children: align.map((a, k) => {
          const cell = { tag, children: inline(cells(l)[k] || '') };
          if (a) cell.align = a;
          return cell;
        }),
      });
      const head = { tag: 'thead', children: [row(line, 'th')] };
      const body = [];
      i += 2;
      while (i < lines.length && isTableRow(lines[i])) {
        body.push(row(lines[i], 'td'));
        i++;
      }
      i--;
      blocks.push({ tag: 'table', children: body.length ? [head, { tag: 'tbody', children: body }] : [head] });
      continue;
    }
    const listKind = (l) => (/^\s*[-*+]\s+/.test(l) ? 'ul' : /^\s*\d{1,9}[.)]\s+/.test(l) ? 'ol' : '');
    const kind = listKind(line);
    if (kind) {
      flushPara();
      const items = [];
      let start = null;
      while (i < lines.length && listKind(lines[i]) === kind) {
        const m = /^\s*(?:[-*+]|(\d{1,9})[.)])\s+(.*)$/.exec(lines[i]);
        if (start === null && m[1] !== undefined) start = Number(m[1]);
        const task = /^\[([ xX])\]\s+(.*)$/.exec(m[2]);
        items.push(task ? { tag: 'li', checked: task[1] !== ' ', children: inline(task[2]) } : { tag: 'li', children: inline(m[2]) });
        i++;
      }
      i--;
      const list = { tag: kind, children: items };
      if (kind === 'ol' && start !== null && start !== 1) list.start = start;
      blocks.push(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      flushPara();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) {
        quoted.push(lines[i].replace(/^\s*>\s?/, ''));
        i++;
      }
      i--;
      blocks.push({ tag: 'blockquote', children: parse(quoted.join('\n')) });
      continue;
    }
    para.push(line);
  }
  flushPara();
  return blocks;
}

// A table is a row of cells between pipes, a rule of dashes under its
// header (colons say how a column aligns), then its rows.
const TABLE_RULE = /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/;

function isTableRow(line) {
  return /\|/.test(line) && !/^\s*$/.test(line);
}

// cells splits a table row at its pipes (not at an escaped one).
function cells(line) {
  let l = line.trim();
  if (l.startsWith('|')) l = l.slice(1);
  if (l.endsWith('|') && !l.endsWith('\\|')) l = l.slice(0, -1);
  return l.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

// The inline syntax, earliest match first. Each alternative is one group
// so the match says which construct it is.
const INLINE = new RegExp(
  [
    '(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)', // 1,2 code
    '\\*\\*(?=\\S)([\\s\\S]*?\\S)\\*\\*', // 3 bold
    '(?<![\\w_])__(?=\\S)([\\s\\S]*?\\S)__(?![\\w_])', // 4 bold
    '\\*(?=[^\\s*])([\\s\\S]*?[^\\s*])\\*', // 5 em
    '(?<![\\w_])_(?=[^\\s_])([\\s\\S]*?[^\\s_])_(?![\\w_])', // 6 em
    '\\[([^\\]\\n]+)\\]\\(([^)\\s]+)\\)', // 7,8 link
    '(https?:\\/\\/[^\\s<>()]*[^\\s<>().,;:!?\'"*_])', // 9 bare URL
  ].join('|'),
);

// inline parses one line (or heading, list item) into inline nodes.
export function inline(src) {
  const out = [];
  let rest = String(src);
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) {
      out.push({ text: rest });
      break;
    }
    if (m.index > 0) out.push({ text: rest.slice(0, m.index) });
    if (m[2] !== undefined) {
      out.push({ tag: 'code', children: [{ text: m[2] }] });
    } else if (m[3] !== undefined || m[4] !== undefined) {
      out.push({ tag: 'strong', children: inline(m[3] ?? m[4]) });
    } else if (m[5] !== undefined || m[6] !== undefined) {
      out.push({ tag: 'em', children: inline(m[5] ?? m[6]) });
    } else if (m[7] !== undefined) {
      const href = safeHref(m[8]);
      out.push(href ? { tag: 'a', href, children: inline(m[7]) } : { text: m[0] });
    } else {
      out.push({ tag: 'a', href: m[9], children: [{ text: m[9] }] });
    }
    rest = rest.slice(m.index + m[0].length);
  }
  return merge(out);
}

// merge joins neighbouring text nodes.
function merge(nodes) {
  const out = [];
  for (const n of nodes) {
    const last = out[out.length - 1];
    if (n.text !== undefined && last && last.text !== undefined) last.text += n.text;
    else out.push(n);
  }
  return out;
}

const TAGS = new Set(['p', 'br', 'h3', 'h4', 'h5', 'h6', 'ul', 'ol', 'li', 'blockquote', 'hr', 'pre', 'code', 'strong', 'em', 'a',
  'table', 'thead', 'tbody', 'tr', 'th', 'td']);
const ALIGN = new Set(['left', 'center', 'right']);

// render turns parsed nodes into a DocumentFragment of doc.
export function render(nodes, doc = document) {
  const frag = doc.createDocumentFragment();
  for (const n of nodes) frag.appendChild(renderNode(n, doc));
  return frag;
}

function renderNode(n, doc) {
  if (n.text !== undefined) return doc.createTextNode(n.text);
  if (!TAGS.has(n.tag)) return doc.createTextNode('');
  const el = doc.createElement(n.tag);
  if (n.tag === 'table') {
    // Wide tables scroll on their own, not the page.
    const wrap = doc.createElement('div');
    wrap.className = 'table-wrap';
    wrap.tabIndex = 0;
    for (const c of n.children || []) el.appendChild(renderNode(c, doc));
    wrap.appendChild(el);
    return wrap;
  }
  if (n.tag === 'a') {
    const href = safeHref(n.href);
    if (!href) return doc.createTextNode(textOf(n));
    el.setAttribute('href', href);
    el.setAttribute('target', '_blank');
    el.setAttribute('rel', 'noopener noreferrer');
  }
  if (n.tag === 'ol' && Number.isInteger(n.start)) el.setAttribute('start', String(n.start));
  if ((n.tag === 'th' || n.tag === 'td') && ALIGN.has(n.align)) el.className = 'align-' + n.align;
  if (n.tag === 'th') el.setAttribute('scope', 'col');
  if (n.tag === 'li' && typeof n.checked === 'boolean') {
    // A task item: its box shows the state; the text is the item's.
    el.className = 'task';
    const box = doc.createElement('input');
    box.type = 'checkbox';
    box.checked = n.checked;
    box.disabled = true;
    box.setAttribute('aria-label', n.checked ? 'done' : 'not done');
    el.appendChild(box);
  }
  for (const c of n.children || []) el.appendChild(renderNode(c, doc));
  return el;
}

// textOf is the plain text of a node, for tests and fallbacks.
export function textOf(n) {
  if (Array.isArray(n)) return n.map(textOf).join('');
  if (n.text !== undefined) return n.text;
  if (n.tag === 'br') return '\n';
  return textOf(n.children || []);
}
