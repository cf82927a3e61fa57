// What the assistant's tools are to a person: their names as a person
// says them, the change an edit makes as lines taken out and put in, and
// whether a failed call was refused (by the person, a rule of the
// server's or the vault guard) rather than broken.

// NAMES are the tools a person meets, by what they do.
const NAMES = {
  Read: 'Read a note',
  Write: 'Write a note',
  Edit: 'Edit a note',
  MultiEdit: 'Edit a note',
  NotebookEdit: 'Edit a notebook',
  Glob: 'Find notes',
  Grep: 'Search the notes',
  LS: 'List a folder',
  Bash: 'Run a command',
  BashOutput: 'Read a command\'s output',
  KillShell: 'Stop a command',
  WebFetch: 'Open a web page',
  WebSearch: 'Search the web',
  TodoWrite: 'Update the to-do list',
  Task: 'Hand a task to a helper',
  Agent: 'Hand a task to a helper',
  ExitPlanMode: 'Go ahead with the plan',
  AskUserQuestion: 'Ask you',
  Skill: 'Use a skill',
  linkedin_post: 'Publish on LinkedIn',
  linkedin_read_comments: 'Read LinkedIn comments',
  linkedin_post_comment: 'Comment on LinkedIn',
  linkedin_reply_comment: 'Reply on LinkedIn',
};

// toolName names a tool as a person would: "Edit a note", "Publish on
// LinkedIn"; a tool it does not know by its own name, MCP tools without
// their server's prefix.
export function toolName(name) {
  const m = /^mcp__([^_]+(?:_[^_]+)*?)__(.+)$/.exec(name || '');
  const bare = m ? m[2] : name || '';
  return NAMES[bare] || bare || 'a tool';
}

// CONTEXT is how many unchanged lines an edit's change keeps around it.
const CONTEXT = 2;

// editLines is what an Edit, MultiEdit or Write call changes, as lines:
// {op: '-' (taken out), '+' (put in) or ' ' (kept, around the change),
// text}; null for any other call. Lines the old and new text share at
// their start and end are kept (CONTEXT of them shown).
export function editLines(tool, input) {
  if (!input || typeof input !== 'object') return null;
  const bare = toolName(tool);
  if (bare === 'Write a note' && typeof input.content === 'string') {
    return input.content.split('\n').map((text) => ({ op: '+', text }));
  }
  if (bare !== 'Edit a note') return null;
  const edits = Array.isArray(input.edits) ? input.edits : [input];
  const out = [];
  edits.forEach((e, i) => {
    if (typeof e?.old_string !== 'string' || typeof e?.new_string !== 'string') return;
    if (i > 0 && out.length) out.push({ op: ' ', text: '…' });
    out.push(...lineDiff(e.old_string, e.new_string));
  });
  return out.length ? out : null;
}

function lineDiff(before, after) {
  const a = before.split('\n');
  const b = after.split('\n');
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let end = 0;
  while (end < a.length - start && end < b.length - start && a[a.length - 1 - end] === b[b.length - 1 - end]) end++;
  const kept = (lines) => lines.map((text) => ({ op: ' ', text }));
  return [
    ...kept(a.slice(Math.max(0, start - CONTEXT), start)),
    ...a.slice(start, a.length - end).map((text) => ({ op: '-', text })),
    ...b.slice(start, b.length - end).map((text) => ({ op: '+', text })),
    ...kept(a.slice(a.length - end, Math.min(a.length, a.length - end + CONTEXT))),
  ];
}

// refused reports whether a failed tool call's result says it was not
// allowed to run (the vault guard's "Access denied", a rule of the
// server's, the person's "no"), not that it ran and failed.
export function refused(result) {
  return /access denied|not allowed|was not made|denied|refused|blocked|doesn't want to proceed|rejected/i.test(result || '');
}
