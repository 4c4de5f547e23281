/**
 * `deno task test:arm64`: the linux-arm64 library's kernel tests on an x86-64
 * host. It cross-compiles the library (NEON code for real) with Debian's
 * `aarch64-linux-gnu-gcc`, gets the arm64 Deno from npm
 * (`@deno/linux-arm64-glibc`, unpacked into .cache/arm64-deno/), and runs
 * tests/ops_test.ts (every op at every SIMD level the CPU has, NEON
 * included, against the float64 reference) and tests/ffi_test.ts under
 * `qemu-aarch64`. Not part of `deno task test`: it takes minutes under
 * emulation. Needs `apt-get install gcc-aarch64-linux-gnu qemu-user`.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { buildNative, compilerAvailable } from "../ffi/build.ts";
import { ARM64_CC } from "./build_dist.ts";

const ROOT = fileURLToPath(new URL("../", import.meta.url)).replace(/\/$/, "");
const SYSROOT = "/usr/aarch64-linux-gnu";
const TESTS = ["tests/ops_test.ts", "tests/ffi_test.ts"];

async function run(cmd: string, args: string[], opts: Deno.CommandOptions = {}) {
  const st = await new Deno.Command(cmd, { args, stdout: "inherit", stderr: "inherit", ...opts })
    .output();
  if (!st.success) throw new Error(`${cmd} ${args.join(" ")} failed (exit ${st.code})`);
}

if (import.meta.main) {
  if (!compilerAvailable([ARM64_CC]) || !compilerAvailable(["qemu-aarch64"])) {
    console.error(
      `test:arm64: needs ${ARM64_CC} and qemu-aarch64 ` +
        "(Debian: apt-get install gcc-aarch64-linux-gnu qemu-user)",
    );
    Deno.exit(2);
  }
  console.log(`building linux-arm64 with ${ARM64_CC}`);
  const lib = await buildNative({ buildDir: `${ROOT}/build/arm64`, cc: ARM64_CC, verbose: false });
  const dir = `${ROOT}/.cache/arm64-deno`;
  const deno = `${dir}/package/deno`;
  try {
    await Deno.stat(deno);
  } catch {
    // the arm64 build of the Deno that runs this script, or the newest published
    const want = Deno.version.deno;
    await Deno.mkdir(dir, { recursive: true });
    const versions: string[] = JSON.parse(
      new TextDecoder().decode(
        (await new Deno.Command("npm", {
          args: ["view", "@deno/linux-arm64-glibc", "versions", "--json"],
          stdout: "piped",
        }).output()).stdout,
      ),
    );
    const v = versions.includes(want) ? want : versions.at(-1)!;
    console.log(`fetching @deno/linux-arm64-glibc@${v} from npm`);
    await run("npm", ["pack", `@deno/linux-arm64-glibc@${v}`], { cwd: dir });
    await run("tar", ["xzf", `deno-linux-arm64-glibc-${v}.tgz`], { cwd: dir });
  }
  console.log(`running ${TESTS.join(" ")} under qemu-aarch64 with ${lib}`);
  await run("qemu-aarch64", ["-L", SYSROOT, deno, "test", "-A", "--no-check", ...TESTS], {
    cwd: ROOT,
    env: { LLM_EDGE_LIB: lib, DENO_DIR: `${dir}/deno_dir`, NO_COLOR: "1" },
  });
}
