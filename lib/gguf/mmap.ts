/**
 * The one place lib/gguf learns how files are mapped: the host backend's
 * read-only memory map (le_mmap_file in the native library), so tensor data
 * is never copied into the JavaScript heap.
 *
 * @module
 */
export { mapFile, type MappedFile } from "../backend/host.ts";
