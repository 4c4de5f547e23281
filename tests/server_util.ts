/** What the server tests share: the model they serve and its sizes. */
import { fileURLToPath } from "node:url";

/** The embedded model. */
export const MODEL = fileURLToPath(
  new URL("../../shared/models/tolstoy-6m-f16.gguf", import.meta.url),
);
/** The API key of the keyed server. */
export const KEY = "sk-test-key";
/** Tokens per slot. */
export const SLOT = 256;
