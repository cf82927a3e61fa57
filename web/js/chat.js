// ChatView draws one session's transcript from its events: the person's
// messages, the assistant's replies with their tool calls, and the cards
// for open questions and permission prompts. The events are the only
// source: a page that attaches late or reloads gets the same picture from
// the replay.

import { parse, render } from './markdown.js';
import { toolName, editLines, refused } from './tools.js';

// h creates an element; text is always set as text, never parsed as HTML.
// rateLimitText says where the account stands with its rate limit.
function rateLimitText(ev) {
  const window = { five_hour: 'five-hour', seven_day: 'weekly' }[ev.window] || ev.window || '';
  const what = ev.status === 'rejected' ? 'reached' : 'nearly reached';
  const until = ev.resets_at ? ', resets ' + new Date(ev.resets_at * 1000).toLocaleString() : '';
  return `The ${window} rate limit is ${what}${until}.`.replace('The  rate', 'The rate');
}

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k === 'text') el.textContent = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return el;
}

// toolDetail is the one input field that says what a tool call is about.
export function toolDetail(input) {
  if (!input || typeof input !== 'object') return '';
  for (const k of ['file_path', 'path', 'url', 'command', 'pattern', 'query', 'text']) {
    if (typeof input[k] === 'string' && input[k]) {
      const v = input[k].replace(/\s+/g, ' ');
      return v.length > 120 ? v.slice(0, 119) + '…' : v;
    }
  }
  return '';
}

let cardCounter = 0;

// SOURCES maps a reply's text element to its segment ({text}: the
// Markdown as written).
const SOURCES = new WeakMap();

// POSTS are the tools whose text is published under the person's name.
const POSTS = /^mcp__linkedin__linkedin_(post|post_comment|reply_comment)$/;

// decision is what a permission or draft card asks the person to decide
// on, shown whole: the words of a post, the plan, the lines an edit takes
// out and puts in, the command; null when the call's detail says it.
function decision(tool, input) {
  if (!input || typeof input !== 'object') return null;
  if (POSTS.test(tool || '') && typeof input.text === 'string') return h('blockquote', { class: 'card-draft', text: input.text });
  if (tool === 'ExitPlanMode' && typeof input.plan === 'string') return h('div', { class: 'md card-plan' }, render(parse(input.plan)));
  const lines = editLines(tool, input);
  if (lines) {
    return h('div', { class: 'card-edit' },
      typeof input.file_path === 'string' ? h('p', { class: 'card-file', text: input.file_path }) : null,
      h('pre', { class: 'card-diff', tabindex: '0', 'aria-label': 'Lines taken out (−) and put in (+)' },
        lines.map((l) => h('span', { class: { '-': 'del', '+': 'ins', ' ': 'ctx' }[l.op], text: (l.op === ' ' ? '  ' : l.op + ' ') + l.text + '\n' }))));
  }
  if (typeof input.command === 'string') return h('pre', { class: 'card-command', tabindex: '0', text: input.command });
  const detail = toolDetail(input);
  return detail ? h('p', { class: 'card-detail', text: detail }) : null;
}

// copyButton copies what text() returns to the clipboard, and says so.
export function copyButton(label, text, cls = 'copy') {
  const b = h('button', { type: 'button', class: cls, text: 'Copy', 'aria-label': label });
  b.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(text());
      b.textContent = 'Copied';
    } catch {
      b.textContent = 'Copy failed';
    }
    setTimeout(() => { b.textContent = 'Copy'; }, 1500);
  });
  return b;
}

// withCodeCopy gives each code block in el a copy button of its own.
function withCodeCopy(el) {
  for (const pre of el.querySelectorAll('pre')) {
    if (pre.parentElement.classList.contains('code-block')) continue;
    const wrap = h('div', { class: 'code-block' });
    pre.replaceWith(wrap);
    // A wide block scrolls sideways: from the keyboard too.
    pre.tabIndex = 0;
    wrap.append(copyButton('Copy the code', () => pre.textContent, 'copy copy-code'), pre);
  }
  return el;
}

export class ChatView {
  // root is the transcript element; actions are
  // {answer(requestID, answers), permission(requestID, behavior, remember)},
  // each returning a promise; onChange(kind) runs after a change of state.
  constructor(root, actions, onChange) {
    this.root = root;
    this.actions = actions;
    this.onChange = onChange || (() => {});
    this.clear();
  }

  // reset empties the view (another session, or a replay from the start).
  reset() {
    this.clear();
    this.onChange('reset');
  }

  clear() {
    this.root.replaceChildren();
    this.running = false;
    this.turn = null; // the assistant reply being written
    this.segment = null; // its text part being written
    this.cards = new Map(); // request id -> {el, kind, tool}
    this.tools = new Map(); // tool call id -> its line
    // calls are the inputs of the turn's latest call of each tool, as the
    // model made it: the CLI asks about ExitPlanMode with an empty input.
    this.calls = new Map();
    this.title = ''; // the title the person gave the chat, from its event
    // last is the newest turn's number, message and reply, for
    // regenerating it.
    this.last = null;
    this.status = '';
    this.firstMessage = '';
    this.messages = 0;
    this.turns = 0;
    // queue is the messages waiting behind the running reply, in order
    // ({id, message}); settled are the ids of messages given to the
    // running reply that went in or were refused.
    this.queue = [];
    this.settled = new Set();
    this.pendingRender = new Set();
    clearTimeout(this.renderTimer);
    this.renderTimer = null;
  }

  get empty() {
    return this.messages === 0;
  }

  get waiting() {
    return this.cards.size > 0;
  }

  // apply shows one event; info.again marks an open question or
  // permission prompt sent again after a re-attach.
  apply(ev, info = {}) {
    const stick = this.atBottom();
    switch (ev.type) {
      case 'turn_start': {
        // A waiting message runs: the first one, in the queue's order.
        const i = this.queue.findIndex((q) => q.message === ev.message);
        if (i >= 0) this.queue.splice(i, 1);
        this.flush();
        this.closeTurn();
        this.turns++;
        this.addUser(ev.message || '', ev.attachments, ev.notes);
        this.openTurn();
        for (const b of this.root.querySelectorAll('.regenerate')) b.remove();
        this.calls.clear();
        this.last = { turn: this.turns, message: ev.message || '', plain: !(ev.attachments || []).length && !(ev.notes || []).length, reply: this.turn };
        this.running = true;
        this.setStatus('');
        break;
      }
      case 'queued':
        if (!this.queue.some((q) => q.id === ev.queue_id)) this.queue.push({ id: ev.queue_id, message: ev.message || '' });
        break;
      case 'queue_cancelled':
        this.queue = this.queue.filter((q) => q.id !== ev.queue_id);
        break;
      case 'steered':
        // The person's message went into the running reply: shown there.
        this.settled.add(ev.queue_id);
        this.flush();
        this.segment = null;
        this.messages++;
        this.part(h('div', { class: 'msg user steered' }, h('div', { class: 'bubble', 'aria-label': 'You said' }, plain(ev.message || ''))));
        break;
      case 'text':
        this.appendText(ev.delta || '');
        break;
      case 'status':
        if (ev.message === 'Interrupted') this.addNote('Interrupted', 'note interrupted');
        else if (this.running) this.setStatus(ev.message || 'Working…');
        break;
      case 'tool':
        if (ev.name !== 'AskUserQuestion') this.addTool(ev.name, ev.input, ev.id);
        this.calls.set(ev.name, ev.input);
        if (this.running) this.setStatus(`${toolName(ev.name)} ${toolDetail(ev.input)}`.trim());
        break;
      case 'tool_result':
        this.toolResult(ev);
        break;
      case 'title':
        this.title = ev.title || '';
        break;
      case 'rewound':
        if (ev.conversation) this.rewound(ev.turn);
        break;
      case 'done':
        this.endTurn();
        break;
      case 'error':
        this.flush();
        this.part(h('div', { class: 'turn-error', role: 'alert' }, h('strong', { text: 'Error: ' }), ev.message || 'Something went wrong.'));
        this.endTurn();
        break;
      case 'question':
        if (!this.cards.has(ev.request_id)) this.addQuestion(ev);
        break;
      case 'permission':
        if (!this.cards.has(ev.request_id)) this.addPermission(ev);
        break;
      case 'draft':
        // Held back until the person confirms, here or in the chat.
        if (!this.cards.has(ev.request_id)) this.addPermission(ev, true);
        break;
      case 'question_answered':
      case 'permission_answered':
      case 'draft_answered':
        this.answered(ev);
        break;
      case 'refused':
        // A message over the budget, or given to a reply that ended
        // first: it never reached the assistant.
        if (ev.queue_id) {
          this.settled.add(ev.queue_id);
          this.queue = this.queue.filter((q) => q.id !== ev.queue_id);
        }
        this.flush();
        this.addNote('Not sent: ' + (ev.error || 'refused.'), 'note error');
        break;
      case 'rate_limit':
        if (ev.status !== 'allowed') this.addNote(rateLimitText(ev), 'note');
        break;
      case 'settings':
        break;
      case 'changes':
        this.addChanges(ev);
        break;
      case 'imported':
        this.addImported(ev.messages || []);
        break;
      case 'terminal_turns':
        this.flush();
        this.closeTurn();
        // The newest answer is the terminal's now: none to regenerate.
        for (const b of this.root.querySelectorAll('.regenerate')) b.remove();
        this.last = null;
        this.addImported(ev.messages || [], 'terminal');
        break;
      default:
        return;
    }
    if (stick) this.scrollToBottom();
    this.onChange(ev.type);
  }

  atBottom() {
    const r = this.root;
    return r.scrollHeight - r.scrollTop - r.clientHeight < 120;
  }

  scrollToBottom() {
    this.root.scrollTop = this.root.scrollHeight;
  }

  setStatus(text) {
    this.status = text;
  }

  addUser(text, files, notes) {
    this.messages++;
    if (!this.firstMessage) this.firstMessage = text;
    const attached = this.actions.attached ? this.actions.attached(files, notes) : null;
    this.root.appendChild(h('div', { class: 'msg user', 'data-turn': String(this.turns) }, h('div', { class: 'bubble', 'aria-label': 'You said' }, attached, plain(text))));
  }

  // rewound takes turn and the ones after it out of the transcript: the
  // conversation goes on from before it (a regenerated answer).
  rewound(turn) {
    this.flush();
    for (const el of [...this.root.querySelectorAll(':scope > [data-turn]')]) {
      if (Number(el.dataset.turn) >= turn) el.remove();
    }
    this.messages = this.root.querySelectorAll('.msg').length;
    if (this.last && this.last.turn >= turn) this.last = null;
  }

  // addImported shows a conversation imported when the chat was made, or
  // (from 'terminal') what was said in the chat's terminal.
  addImported(messages, from = 'imported') {
    const terminal = from === 'terminal';
    if (terminal && messages.length) this.root.appendChild(h('div', { class: 'note', text: 'In the terminal:' }));
    for (const m of messages) {
      this.messages++;
      const role = m.role === 'assistant' ? 'assistant' : 'user';
      this.root.appendChild(h('div', { class: `msg ${role} ${from}` },
        role === 'user' ? h('div', { class: 'bubble', 'aria-label': terminal ? 'You said in the terminal' : 'You said earlier' }, plain(m.content || ''))
          : withCodeCopy(h('div', { class: 'md' }, render(parse(m.content || ''))))));
    }
    if (messages.length && !terminal) this.root.appendChild(h('div', { class: 'note', text: 'Earlier conversation, imported.' }));
  }

  // addChanges offers what the turn changed in the person's notes: a line
  // that opens the diff (and its Undo).
  addChanges(ev) {
    const n = (ev.files || []).length;
    if (!n) return;
    this.flush();
    this.segment = null;
    const turn = this.turns;
    const text = `Changed: ${n} ${n === 1 ? 'note' : 'notes'}`;
    this.part(h('button', { type: 'button', class: 'changes-line', 'data-turn': String(turn), title: ev.files.map((f) => f.path).join(', '),
      text, onclick: () => this.actions.showChanges && this.actions.showChanges(turn) }));
  }

  openTurn() {
    this.turn = h('article', { class: 'msg assistant running', 'aria-label': 'Reply', 'data-turn': String(this.turns) },
      h('div', { class: 'typing', 'aria-hidden': 'true' }, h('span'), h('span'), h('span')));
    this.segment = null;
    this.root.appendChild(this.turn);
  }

  // part appends an element to the reply (or to the transcript when the
  // event came outside a turn).
  part(el) {
    (this.turn || this.root).insertBefore(el, this.turn ? this.turn.querySelector(':scope > .typing') : null);
    return el;
  }

  appendText(delta) {
    if (!delta) return;
    if (!this.turn) this.openTurn();
    if (!this.segment) {
      this.segment = { text: '', el: this.part(h('div', { class: 'md' })) };
      SOURCES.set(this.segment.el, this.segment);
    }
    this.segment.text += delta;
    this.pendingRender.add(this.segment);
    // Deltas come in bursts (and a replay brings hundreds at once): draw
    // at most every few milliseconds.
    if (!this.renderTimer) {
      this.renderTimer = setTimeout(() => {
        const stick = this.atBottom();
        this.flush();
        if (stick) this.scrollToBottom();
      }, 16);
    }
  }

  flush() {
    clearTimeout(this.renderTimer);
    this.renderTimer = null;
    for (const seg of this.pendingRender) seg.el.replaceChildren(render(parse(seg.text)));
    for (const seg of this.pendingRender) withCodeCopy(seg.el);
    this.pendingRender.clear();
  }

  addTool(name, input, id) {
    this.flush();
    this.segment = null;
    const detail = toolDetail(input);
    const line = this.part(h('div', { class: 'tool', title: name || '' }, h('span', { class: 'tool-name', text: toolName(name) }), detail ? h('span', { class: 'tool-detail', text: detail }) : null));
    if (id) this.tools.set(id, line);
  }

  // toolResult marks a tool call that did not run (refused by the
  // person, the server or the vault guard) or failed, with what it said.
  toolResult(ev) {
    const line = this.tools.get(ev.id);
    if (!line || !ev.is_error) return;
    const no = refused(ev.content);
    line.classList.add(no ? 'refused' : 'failed');
    // The CLI's wrapping of a hook's refusal says nothing to a person.
    const said = (ev.content || '').replace(/<\/?tool_use_error>/g, '').replace(/^\s*\w+:\S+ hook error:\s*/, '').trim();
    line.append(h('span', { class: 'tool-outcome', text: (no ? 'Not allowed' : 'Failed') + (said ? ': ' + (said.length > 200 ? said.slice(0, 199) + '…' : said) : '') }));
  }

  addNote(text, cls = 'note') {
    this.flush();
    this.segment = null;
    return this.part(h('div', { class: cls, text }));
  }

  endTurn() {
    this.flush();
    this.running = false;
    this.setStatus('');
    this.closeTurn();
  }

  closeTurn() {
    if (!this.turn) return;
    const reply = this.turn;
    reply.classList.remove('running');
    const typing = reply.querySelector(':scope > .typing');
    if (typing) typing.remove();
    if (!reply.querySelector(':scope > :not(.typing)')) reply.appendChild(h('div', { class: 'note', text: '(no reply)' }));
    const actions = h('div', { class: 'msg-actions' });
    if (reply.querySelector('.md')) {
      // The reply as the model wrote it, in Markdown.
      actions.append(copyButton('Copy the reply', () => [...reply.querySelectorAll(':scope > .md')].map((m) => (SOURCES.get(m)?.text || m.textContent).trim()).join('\n\n')));
    }
    const last = this.last;
    if (last && last.reply === reply && last.plain && this.actions.regenerate) {
      const turn = last.turn;
      actions.append(h('button', { type: 'button', class: 'regenerate', text: 'Regenerate', 'aria-label': 'Regenerate the last answer',
        onclick: (e) => {
          e.currentTarget.disabled = true;
          const changed = !!this.root.querySelector(`.changes-line[data-turn="${turn}"]`);
          this.actions.regenerate(turn, last.message, changed);
        } }));
    }
    if (actions.children.length) reply.appendChild(actions);
    this.turn = null;
    this.segment = null;
  }

  // A card that resolves the request: answer in flight, then wait for
  // the *_answered event (from this client or another) to remove it.
  async settle(card, fields, send) {
    const error = card.querySelector('.form-error');
    error.hidden = true;
    fields.disabled = true;
    card.classList.add('sending');
    try {
      await send();
    } catch (err) {
      if (err.status === 409) return; // answered elsewhere: its event removes the card
      if (err.status === 404) {
        error.textContent = 'This is no longer open.';
        error.hidden = false;
        return;
      }
      error.textContent = err.message || 'Sending the answer failed.';
      error.hidden = false;
      fields.disabled = false;
    } finally {
      card.classList.remove('sending');
    }
  }

  addQuestion(ev) {
    this.flush();
    this.segment = null;
    const questions = Array.isArray(ev.questions) ? ev.questions : [];
    const id = 'q' + ++cardCounter;
    const fields = h('fieldset', { class: 'card-fields' });
    const form = h('form', { class: 'card question', 'aria-labelledby': id + '-title', 'data-request-id': ev.request_id },
      h('h3', { id: id + '-title', class: 'card-title', text: questions.length > 1 ? 'Major has some questions' : 'Major asks' }),
      fields,
      h('p', { class: 'form-error', role: 'alert', hidden: true }));
    const collectors = [];
    const submit = (answers) => this.settle(form, fields, () => this.actions.answer(ev.request_id, answers));
    const single = questions.length === 1 && !questions[0].multiSelect;

    questions.forEach((q, qi) => {
      const qid = `${id}-${qi}`;
      const group = h('div', { class: 'question-block', role: 'group', 'aria-labelledby': qid },
        h('p', { id: qid, class: 'question-text' }, q.header ? h('span', { class: 'chip', text: q.header }) : null, q.question || ''));
      const options = Array.isArray(q.options) ? q.options : [];
      const list = h('div', { class: 'options' });
      let chosen = null;
      const other = h('input', { type: 'text', id: qid + '-other', class: 'other', placeholder: 'Type your own answer', autocomplete: 'off' });
      if (q.multiSelect) {
        options.forEach((o, oi) => {
          const box = h('input', { type: 'checkbox', id: `${qid}-${oi}`, value: o.label || '' });
          list.appendChild(h('label', { class: 'option check', for: `${qid}-${oi}` }, box,
            h('span', { class: 'option-body' }, h('span', { class: 'option-label', text: o.label || '' }), o.description ? h('span', { class: 'option-desc', text: o.description }) : null)));
        });
      } else {
        options.forEach((o) => {
          const b = h('button', { type: 'button', class: 'option', 'aria-pressed': 'false' },
            h('span', { class: 'option-label', text: o.label || '' }), o.description ? h('span', { class: 'option-desc', text: o.description }) : null);
          b.addEventListener('click', () => {
            if (single) {
              submit({ [q.question]: o.label });
              return;
            }
            chosen = o.label;
            for (const x of list.children) x.setAttribute('aria-pressed', String(x === b));
          });
          list.appendChild(b);
        });
      }
      group.append(list, h('label', { class: 'other-label', for: qid + '-other', text: 'Other' }), other);
      fields.appendChild(group);
      collectors.push(() => {
        const typed = other.value.trim();
        if (q.multiSelect) {
          const picked = [...list.querySelectorAll('input:checked')].map((b) => b.value);
          if (typed) picked.push(typed);
          return picked.join(', ');
        }
        return typed || chosen || '';
      });
    });
    fields.appendChild(h('div', { class: 'card-actions' }, h('button', { type: 'submit', class: 'primary', text: 'Send answer' })));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const answers = {};
      const error = form.querySelector('.form-error');
      for (let i = 0; i < questions.length; i++) {
        const a = collectors[i]();
        if (!a) {
          error.textContent = 'Choose an option or type an answer' + (questions.length > 1 ? ' for every question.' : '.');
          error.hidden = false;
          return;
        }
        answers[questions[i].question] = a;
      }
      submit(answers);
    });
    this.part(form);
    this.cards.set(ev.request_id, { el: form, kind: 'question', questions });
    this.setStatus('Waiting for your answer');
  }

  addPermission(ev, draft = false) {
    this.flush();
    this.segment = null;
    const id = 'p' + ++cardCounter;
    const fields = h('fieldset', { class: 'card-fields' });
    const name = toolName(ev.tool);
    const card = h('form', { class: 'card permission' + (draft ? ' draft' : ''), 'aria-labelledby': id + '-title', 'data-request-id': ev.request_id, 'data-tool': ev.tool || '' },
      h('p', { class: 'card-kicker', text: draft ? 'Nothing is published until you confirm' : 'Major asks for your permission' }),
      h('h3', { id: id + '-title', class: 'card-title', text: name + '?' }),
      fields,
      h('p', { class: 'form-error', role: 'alert', hidden: true }));
    // What the person decides on comes first and whole: a post's exact
    // words, the plan, an edit's lines; then why it asks, then the raw
    // request, folded.
    const asked = ev.input && Object.keys(ev.input).length ? ev.input : this.calls.get(ev.tool);
    const what = decision(ev.tool, asked);
    if (what) fields.appendChild(what);
    // The server's stock reason only names the tool again.
    const stock = [`${ev.tool} needs your permission.`, asked && asked.file_path];
    if (ev.reason && !stock.includes(ev.reason)) fields.appendChild(h('p', { class: 'card-reason', text: ev.reason }));
    const input = ev.input && Object.keys(ev.input).length ? JSON.stringify(ev.input, null, 2) : '';
    if (input) fields.appendChild(h('details', { class: 'card-input' }, h('summary', { text: 'The whole request' }), h('pre', { tabindex: '0', text: input })));
    const answer = (behavior, remember) => this.settle(card, fields, () => this.actions.permission(ev.request_id, behavior, remember));
    fields.appendChild(h('div', { class: 'card-actions' },
      h('button', { type: 'button', class: 'primary', text: 'Allow', onclick: () => answer('allow', false) }),
      draft || ev.can_remember === false ? null : h('button', { type: 'button', text: 'Allow for this session', onclick: () => answer('allow', true) }),
      h('button', { type: 'button', class: 'danger', text: 'Deny', onclick: () => answer('deny', false) })));
    card.addEventListener('submit', (e) => e.preventDefault());
    this.part(card);
    this.cards.set(ev.request_id, { el: card, kind: draft ? 'draft' : 'permission', tool: ev.tool });
    if (!draft) this.setStatus('Waiting for your permission');
  }

  answered(ev) {
    const card = this.cards.get(ev.request_id);
    if (!card) return;
    this.cards.delete(ev.request_id);
    let text;
    if (card.kind === 'question') {
      if (ev.outcome === 'answered') {
        const parts = Object.entries(ev.answers || {}).map(([q, a]) => `${q} → ${a}`);
        text = parts.join('; ') || 'Answered.';
      } else {
        text = ev.outcome === 'timeout' ? 'The question timed out.' : 'The question was cancelled.';
      }
    } else if (card.kind === 'draft') {
      const tool = toolName(card.tool);
      const how = ev.by === 'chat' ? ' in the chat' : '';
      if (ev.outcome === 'answered') text = (ev.behavior === 'allow' ? 'Confirmed: ' : 'Declined: ') + tool + how + '.';
      else text = `The draft (${tool}) expired.`;
    } else {
      const tool = toolName(card.tool);
      if (ev.outcome === 'answered') text = (ev.behavior === 'allow' ? 'Allowed: ' : 'Denied: ') + tool + '.';
      else text = ev.outcome === 'timeout' ? `The request (${tool}) timed out.` : `The request (${tool}) was cancelled.`;
    }
    card.el.replaceWith(h('div', { class: 'note answered', text }));
    if (this.running) this.setStatus(this.cards.size ? this.status : 'Working…');
  }
}

// plain renders text as it was typed: text nodes and line breaks.
export function plain(text) {
  const frag = document.createDocumentFragment();
  String(text).split('\n').forEach((line, i) => {
    if (i > 0) frag.appendChild(document.createElement('br'));
    frag.appendChild(document.createTextNode(line));
  });
  return frag;
}
