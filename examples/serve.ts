/**
 * The OpenAI-compatible edge handler with Deno.serve: /v1/completions,
 * /v1/chat/completions (streaming too), /v1/embeddings, /health, /metrics.
 *
 *   deno run --allow-read --allow-env --allow-ffi --allow-net examples/serve.ts [model.gguf]
 *   curl localhost:8080/v1/completions -d '{"prompt":"The prince","max_tokens":16}'
 *
 * PORT picks the port (0: any free one). The same handler works as
 * `export default { fetch: handler }` for `deno serve`.
 */
import { createHandler } from "@llm-edge/llm-edge";

const path = Deno.args[0] ?? new URL("../models/tolstoy-6m-f16.gguf", import.meta.url).pathname;

const handler = createHandler({ model: path, parallel: 2 });
await handler.ready;
const server = Deno.serve({
  hostname: "127.0.0.1",
  port: Number(Deno.env.get("PORT") ?? 8080),
  onListen: ({ hostname, port }) => console.log(`listening on http://${hostname}:${port}`),
}, handler);
Deno.addSignalListener("SIGINT", async () => {
  await server.shutdown();
  await handler.close();
  Deno.exit(0);
});
