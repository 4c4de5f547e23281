/**
 * Shared by the backend tests that check a loop of computes on the
 * caller's thread still lets the event loop poll I/O: a local HTTP request
 * sent while the loop runs must be answered long before the loop would end.
 *
 * @module
 */

/** How a request fared while `step` ran in a loop. */
export interface LoopRequest {
  /** Milliseconds until the answer came (0: not within the loop's 3 s). */
  answered: number;
  /** Steps run meanwhile. */
  runs: number;
}

/**
 * Runs `step` (awaited) after ~0.5 ms of busy work, as a small model's
 * generation loop does, until a request to a local server is answered or
 * 3 s have passed. Every step of the request (connect, read, handler,
 * write) needs the event loop to poll I/O, which awaiting resolved promises
 * never does.
 */
export async function requestDuringLoop(step: () => Promise<void>): Promise<LoopRequest> {
  await using server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response("ok"),
  );
  const url = `http://127.0.0.1:${server.addr.port}/`;
  await (await fetch(url)).text(); // connection set up before the loop
  let answered = 0, runs = 0;
  const t0 = performance.now();
  const req = fetch(url).then((r) => r.text()).then(() => answered = performance.now() - t0);
  while (!answered && performance.now() - t0 < 3000) {
    const t = performance.now();
    while (performance.now() - t < 0.5); // the rest of a step (sampling, ...)
    await step();
    runs++;
  }
  await req;
  return { answered, runs };
}
