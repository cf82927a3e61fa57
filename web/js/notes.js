// The person's notes in the web client: files and notes attached to the
// next message (the tray under the composer, filled by the attach and
// camera buttons, paste and drop, and the note picker), thumbnails of the
// files a message carried, the notes panel that browses the person's
// folder and shows a note, and the diff of a turn's changes with its Undo.
//
// A file from the vault is content the agent or another site may have
// written. Nothing here lets one run in this page's origin, where the
// token lives: images are shown as <img> from a blob (an image runs no
// script, an SVG in <img> neither), Markdown and text go through the
// renderer that never touches innerHTML, and every other file is only
// ever offered as a download (an <a download> never renders it).

import { parse, render } from './markdown.js';
import { h } from './chat.js';

const IMAGE = /^image\/(jpeg|png|gif|webp)$/;

// size is a byte count for people.
export function size(n) {
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + ' MB';
  if (n >= 1 << 10) return Math.round(n / (1 << 10)) + ' KB';
  return n + ' bytes';
}

// vaultImage is an <img> of an image in the person's notes, filled once
// it has loaded; a file that is not an image stays a name.
export function vaultImage(api, path, alt) {
  const img = h('img', { class: 'thumb', alt: alt || path, loading: 'lazy' });
  api.file(path).then(({ blob, type }) => {
    if (IMAGE.test(type)) img.src = URL.createObjectURL(blob);
  }).catch(() => img.replaceWith(h('span', { class: 'chip', text: alt || path })));
  return img;
}

// attachedFiles shows the files and notes a message carried: images as
// thumbnails, other files and notes as chips that open in the notes
// panel.
export function attachedFiles(api, files, notes, open) {
  if (!(files && files.length) && !(notes && notes.length)) return null;
  const box = h('div', { class: 'attached' });
  for (const f of files || []) {
    const label = `${f.name} (${size(f.size || 0)})`;
    const content = IMAGE.test(f.media_type) ? vaultImage(api, f.path, f.name) : h('span', { text: '📎 ' + label });
    box.appendChild(h('button', { type: 'button', class: 'attached-file', title: f.path, 'aria-label': 'Open ' + label, onclick: () => open(f.path) }, content));
  }
  for (const p of notes || []) {
    box.appendChild(h('button', { type: 'button', class: 'attached-file note-chip', title: p, onclick: () => open(p) }, h('span', { class: 'note-mark', text: p })));
  }
  return box;
}

// Tray holds what goes with the next message: files chosen, pasted or
// dropped, and notes picked.
export class Tray {
  constructor(root, onChange) {
    this.root = root;
    this.onChange = onChange || (() => {});
    this.files = [];
    this.notes = [];
    this.urls = [];
  }

  get empty() {
    return this.files.length === 0 && this.notes.length === 0;
  }

  addFiles(list) {
    for (const f of list) {
      if (f && f.size !== undefined) this.files.push(f);
    }
    this.render();
  }

  addNote(path) {
    if (!this.notes.includes(path)) this.notes.push(path);
    this.render();
  }

  clear() {
    this.files = [];
    this.notes = [];
    this.render();
  }

  render() {
    for (const u of this.urls) URL.revokeObjectURL(u);
    this.urls = [];
    const items = [];
    this.files.forEach((f, i) => {
      let preview = null;
      // The person's own file, shown only if it is an image.
      if (IMAGE.test(f.type)) {
        const url = URL.createObjectURL(f);
        this.urls.push(url);
        preview = h('img', { class: 'thumb', src: url, alt: '' });
      }
      items.push(h('li', { class: 'tray-item' }, preview, h('span', { class: 'tray-name', text: `${f.name} (${size(f.size)})` }),
        h('button', { type: 'button', class: 'link-button', 'aria-label': 'Remove ' + f.name, text: '✕', onclick: () => { this.files.splice(i, 1); this.render(); } })));
    });
    this.notes.forEach((p, i) => {
      items.push(h('li', { class: 'tray-item' }, h('span', { class: 'tray-name note-mark', text: p }),
        h('button', { type: 'button', class: 'link-button', 'aria-label': 'Remove ' + p, text: '✕', onclick: () => { this.notes.splice(i, 1); this.render(); } })));
    });
    this.root.replaceChildren(...items);
    this.root.hidden = items.length === 0;
    this.onChange();
  }
}

// NotesPanel browses the person's folder and shows one note; in pick mode
// choosing a file attaches it instead.
export class NotesPanel {
  constructor(root, api, { onPick }) {
    this.root = root;
    this.api = api;
    this.onPick = onPick;
    this.title = root.querySelector('.notes-title');
    this.body = root.querySelector('.notes-body');
    this.search = root.querySelector('.notes-search');
    this.search.addEventListener('input', () => this.filter());
    root.querySelector('.notes-close').addEventListener('click', () => this.close());
    this.picking = false;
    this.path = '.';
    this.entries = [];
    this.urls = [];
  }

  setApi(api) {
    this.api = api;
  }

  close() {
    this.root.hidden = true;
    for (const u of this.urls) URL.revokeObjectURL(u);
    this.urls = [];
  }

  // browse opens the panel on a folder; pick says whether choosing a file
  // attaches it to the next message.
  async browse(path = '.', pick = false) {
    this.picking = pick;
    this.root.hidden = false;
    this.search.hidden = false;
    this.search.value = '';
    this.title.textContent = pick ? 'Attach a note' : 'Your notes';
    this.path = path;
    this.body.replaceChildren(h('p', { class: 'muted', text: 'Loading…' }));
    try {
      const tree = await this.api.tree(path);
      this.path = tree.path;
      this.entries = tree.entries || [];
      this.list(this.entries);
    } catch (err) {
      this.body.replaceChildren(h('p', { class: 'form-error', text: err.message }));
    }
  }

  join(name) {
    return this.path === '.' ? name : this.path + '/' + name;
  }

  list(entries, found) {
    const rows = [];
    if (this.path !== '.' && !found) {
      const up = this.path.split('/').slice(0, -1).join('/') || '.';
      rows.push(h('li', {}, h('button', { type: 'button', class: 'entry folder', text: '⬆ ..', onclick: () => this.browse(up, this.picking) })));
    }
    for (const e of entries) {
      const path = found ? e.path : this.join(e.name);
      const label = (e.type === 'folder' ? '📁 ' : '📄 ') + (found ? path : e.name);
      rows.push(h('li', {}, h('button', {
        type: 'button', class: 'entry ' + e.type, text: label,
        onclick: () => (e.type === 'folder' ? this.browse(path, this.picking) : this.choose(path)),
      })));
    }
    if (!rows.length) rows.push(h('li', { class: 'muted', text: found ? 'No note matches.' : 'This folder is empty.' }));
    this.body.replaceChildren(h('ul', { class: 'entries' }, rows));
  }

  choose(path) {
    if (this.picking) {
      this.onPick(path);
      this.close();
      return;
    }
    this.open(path);
  }

  // filter searches the tree below the open folder, breadth first, for
  // names containing the search text (a bounded number of folders).
  async filter() {
    const q = this.search.value.trim().toLowerCase();
    if (!q) {
      this.list(this.entries);
      return;
    }
    const found = [];
    const queue = [this.path];
    for (let seen = 0; queue.length && seen < 40 && found.length < 100; seen++) {
      const dir = queue.shift();
      let tree;
      try {
        tree = await this.api.tree(dir);
      } catch {
        continue;
      }
      if (this.search.value.trim().toLowerCase() !== q) return; // typed on
      for (const e of tree.entries || []) {
        const path = dir === '.' ? e.name : dir + '/' + e.name;
        if (e.type === 'folder') queue.push(path);
        else if (e.name.toLowerCase().includes(q)) found.push({ ...e, path });
      }
    }
    this.list(found, true);
  }

  // open shows one file: Markdown rendered, text as text, images as
  // images, anything else as a download.
  async open(path) {
    this.root.hidden = false;
    this.search.hidden = true;
    this.title.textContent = path;
    this.body.replaceChildren(h('p', { class: 'muted', text: 'Loading…' }));
    const folder = path.split('/').slice(0, -1).join('/') || '.';
    const back = h('button', { type: 'button', class: 'link-button', text: '← ' + (folder === '.' ? 'Your notes' : folder), onclick: () => this.browse(folder) });
    try {
      const { blob, type } = await this.api.file(path);
      let view;
      if (type === 'text/markdown') {
        view = h('div', { class: 'md note-view' }, render(parse(await blob.text())));
      } else if (type === 'text/plain') {
        view = h('pre', { class: 'note-view', text: await blob.text() });
      } else if (IMAGE.test(type)) {
        const url = URL.createObjectURL(blob);
        this.urls.push(url);
        view = h('img', { class: 'note-image', src: url, alt: path });
      } else {
        // Never shown here: saved as a file.
        const url = URL.createObjectURL(new Blob([blob], { type: 'application/octet-stream' }));
        this.urls.push(url);
        view = h('p', {}, `This file (${type}) is not shown here. `,
          h('a', { href: url, download: path.split('/').pop(), text: 'Download it' }));
      }
      this.body.replaceChildren(back, view);
    } catch (err) {
      this.body.replaceChildren(back, h('p', { class: 'form-error', text: err.message }));
    }
  }
}

// DiffDialog shows what one turn changed, and undoes it with the rewind's
// dry run first.
export class DiffDialog {
  constructor(dialog, { api, session, onDone }) {
    this.dialog = dialog;
    this.api = api;
    this.session = session; // () => the open session's id
    this.onDone = onDone || (() => {});
    this.body = dialog.querySelector('.diff-body');
    this.title = dialog.querySelector('.diff-title');
    this.actions = dialog.querySelector('.diff-actions');
    dialog.querySelector('.diff-close').addEventListener('click', () => dialog.close());
  }

  setApi(api) {
    this.api = api;
  }

  async show(turn) {
    const id = this.session();
    this.title.textContent = 'Changes';
    this.body.replaceChildren(h('p', { class: 'muted', text: 'Loading…' }));
    this.actions.replaceChildren();
    if (!this.dialog.open) this.dialog.showModal();
    let d;
    try {
      d = await this.api.turnDiff(id, turn);
    } catch (err) {
      this.body.replaceChildren(h('p', { class: 'form-error', text: err.message }));
      return;
    }
    const n = d.files.length;
    this.title.textContent = `Changed ${n} ${n === 1 ? 'note' : 'notes'}`;
    const files = h('ul', { class: 'diff-files' }, d.files.map((f) =>
      h('li', {}, h('code', { text: f.path }), ` ${f.status}`, f.binary ? ' (binary)' : ` +${f.insertions} −${f.deletions}`)));
    const pre = h('pre', { class: 'diff' }, (d.diff || '').split('\n').map((line) => {
      const cls = line.startsWith('+') && !line.startsWith('+++') ? 'add'
        : line.startsWith('-') && !line.startsWith('---') ? 'del' : line.startsWith('@@') ? 'hunk' : '';
      return h('span', { class: cls, text: line + '\n' });
    }));
    this.body.replaceChildren(files, pre);
    const error = h('p', { class: 'form-error', role: 'alert', hidden: true });
    const undo = h('button', { type: 'button', class: 'danger', text: 'Undo' });
    undo.addEventListener('click', () => this.undo(id, d.message_id, undo, error));
    this.actions.replaceChildren(error, undo);
  }

  // undo shows what the rewind would restore, then restores it once the
  // person confirms.
  async undo(id, messageID, button, error) {
    button.disabled = true;
    error.hidden = true;
    try {
      const dry = await this.api.rewind(id, { message_id: messageID, dry_run: true });
      const list = h('ul', { class: 'diff-files' }, dry.files.map((f) => h('li', {}, h('code', { text: f }))));
      const confirm = h('button', { type: 'button', class: 'danger', text: 'Restore these notes' });
      const cancel = h('button', { type: 'button', text: 'Keep the changes', onclick: () => this.dialog.close() });
      this.actions.replaceChildren(
        h('p', { text: `Undo restores ${dry.files.length} ${dry.files.length === 1 ? 'note' : 'notes'} to before this message (+${dry.insertions} −${dry.deletions}):` }),
        list, error, h('div', { class: 'card-actions' }, confirm, cancel));
      confirm.addEventListener('click', async () => {
        confirm.disabled = true;
        try {
          const done = await this.api.rewind(id, { message_id: messageID });
          this.actions.replaceChildren(h('p', { class: 'note answered', text: `Restored ${done.files.length} ${done.files.length === 1 ? 'note' : 'notes'}.` + (done.status ? ' ' + done.status : '') }));
          this.onDone();
        } catch (err) {
          error.textContent = err.message;
          error.hidden = false;
          confirm.disabled = false;
        }
      });
    } catch (err) {
      error.textContent = err.message;
      error.hidden = false;
      button.disabled = false;
    }
  }
}
