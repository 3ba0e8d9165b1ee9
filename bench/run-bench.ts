/**
 * Runs a bench's `main`: a failure prints its stack (a bench is read by the developer who ran it,
 * unlike the CLI's one-line errors) and exits 1.
 */
export function runBench(main: () => Promise<void>): void {
  main().catch((error: unknown) => {
    process.stderr.write(`${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exit(1);
  });
}
