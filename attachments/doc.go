// Package attachments owns what a person hands the agent along with a
// message: files uploaded into their vault (a safe name, the media type
// sniffed from the content, the bounds on size and number, images scaled
// down to what the model's API accepts), the notes they attach as primary
// context, an imported conversation, and the content blocks all of these
// become in the person's message (image, document, text, in the Anthropic
// Messages format that the CLI's stream-json input takes).
//
// It writes only below attachments/ in the person's own folder, through an
// os.Root of that folder, and reads notes only through the vault's guard.
// It never commits (the turn's end does, as for any change the agent
// makes) and knows nothing of HTTP, sessions or the CLI: httpapi hands it
// the files of a request, relay carries the blocks it makes to the CLI.
package attachments
