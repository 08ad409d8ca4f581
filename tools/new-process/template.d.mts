/** The files of a new channel process: path (relative to the repository) → content. */
export function channelProcessFiles(options: {
  schema: string;
  name: string;
  channel: string;
  number?: number;
}): Record<string, string>;
