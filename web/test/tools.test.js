import { test } from 'node:test';
import assert from 'node:assert/strict';

import { toolName, editLines, refused } from '../js/tools.js';

test('tools are named as a person says them', () => {
  const cases = [
    ['mcp__linkedin__linkedin_post', 'Publish on LinkedIn'],
    ['mcp__linkedin__linkedin_reply_comment', 'Reply on LinkedIn'],
    ['Edit', 'Edit a note'],
    ['MultiEdit', 'Edit a note'],
    ['Write', 'Write a note'],
    ['ExitPlanMode', 'Go ahead with the plan'],
    ['mcp__other_server__do_thing', 'do_thing'],
    ['SomethingNew', 'SomethingNew'],
    ['', 'a tool'],
    [undefined, 'a tool'],
  ];
  for (const [name, want] of cases) assert.equal(toolName(name), want, name);
});

test('an edit shows the lines it takes out and puts in', () => {
  const lines = (l) => l.map((x) => x.op + x.text);
  const old = 'one\ntwo\nthree\nfour\nfive\nsix';
  assert.deepEqual(lines(editLines('Edit', { file_path: 'a.md', old_string: old, new_string: old.replace('four', 'FOUR') })),
    [' two', ' three', '-four', '+FOUR', ' five', ' six']);
  assert.deepEqual(lines(editLines('Edit', { old_string: 'a', new_string: 'a\nb' })), [' a', '+b']);
  assert.deepEqual(lines(editLines('MultiEdit', { edits: [{ old_string: 'x', new_string: 'y' }, { old_string: 'p', new_string: '' }] })),
    ['-x', '+y', ' …', '-p', '+']);
  assert.deepEqual(lines(editLines('Write', { file_path: 'n.md', content: '# New\ntext' })), ['+# New', '+text']);
  assert.equal(editLines('Read', { file_path: 'a.md' }), null);
  assert.equal(editLines('Edit', { file_path: 'a.md' }), null);
  assert.equal(editLines('Edit', null), null);
});

test('a refused call is told from a failed one', () => {
  assert.equal(refused('Access denied: "/etc/passwd" is outside your vault.'), true);
  assert.equal(refused('The notes are being synced with git right now, so this tool call was not made.'), true);
  assert.equal(refused("The user doesn't want to proceed with this tool use."), true);
  assert.equal(refused('File does not exist.'), false);
  assert.equal(refused(''), false);
});
