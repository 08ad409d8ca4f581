/**
 * An optional peer dependency, loaded if it is installed: undefined when the package
 * itself cannot be found, the error otherwise (a package that is there but fails to load
 * is a broken install, not an absent one).
 */
export async function optionalPeer<T>(name: string): Promise<T | undefined> {
  try {
    return (await import(name)) as T;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    const message = error instanceof Error ? error.message : '';
    if ((code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') && message.includes(`'${name}'`))
      return undefined;
    throw error;
  }
}
