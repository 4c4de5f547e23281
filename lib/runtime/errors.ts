/**
 * The errors a context throws, in their own module so that the context and
 * its leases share them without importing each other.
 *
 * @module
 */

/** Thrown for invalid decode input (tokens, positions, context overflow). */
export class ContextError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ContextError";
  }
}

/** Thrown by a context's methods after it was disposed (and by decodes it cancelled). */
export class ContextDisposedError extends ContextError {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ContextDisposedError";
  }
}

/** Thrown by a synchronous method (clear, truncate) while another caller holds the context. */
export class ContextBusyError extends ContextError {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ContextBusyError";
  }
}
