// Decode every message of an MCAP file with Foxglove's own parsers, as Foxglove Studio does:
// @mcap/core's indexed reader (zstd/lz4 chunks), @foxglove/rosmsg for the ros2msg schema text
// and @foxglove/rosmsg2-serialization for the CDR payload. Prints one JSON document on stdout:
// {"topics": {topic: {"schema": name, "count": n, "errors": [..], "messages": [..]}}}.
// Byte arrays are summarised (length and first bytes); 64-bit integers become strings.
import { open } from "node:fs/promises";
import { createRequire } from "node:module";
import { McapIndexedReader } from "@mcap/core";
import { parse } from "@foxglove/rosmsg";
import { MessageReader } from "@foxglove/rosmsg2-serialization";

const require = createRequire(import.meta.url);
const zstd = require("@foxglove/wasm-zstd");
const lz4 = require("@foxglove/wasm-lz4");

function plain(value) {
  if (typeof value === "bigint") return value.toString();
  if (value instanceof Uint8Array) return { bytes: value.length, head: Array.from(value.slice(0, 4)) };
  if (ArrayBuffer.isView(value)) return Array.from(value);
  if (Array.isArray(value)) return value.map(plain);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, plain(v)]));
  }
  return value;
}

async function main(path) {
  await zstd.isLoaded;
  await lz4.isLoaded;
  const handle = await open(path, "r");
  const readable = {
    size: async () => BigInt((await handle.stat()).size),
    read: async (offset, size) => {
      const buffer = new Uint8Array(Number(size));
      await handle.read(buffer, 0, Number(size), Number(offset));
      return buffer;
    },
  };
  const reader = await McapIndexedReader.Initialize({
    readable,
    decompressHandlers: {
      zstd: (data, size) => zstd.decompress(data, Number(size)),
      lz4: (data, size) => lz4(data, Number(size)),
    },
  });
  const topics = {};
  const readers = new Map();
  for (const [id, channel] of reader.channelsById) {
    const schema = reader.schemasById.get(channel.schemaId);
    const entry = { schema: schema?.name ?? null, encoding: schema?.encoding ?? null, count: 0, errors: [], messages: [] };
    topics[channel.topic] = entry;
    try {
      const text = new TextDecoder().decode(schema.data);
      readers.set(id, new MessageReader(parse(text, { ros2: true })));
    } catch (err) {
      entry.errors.push(`schema: ${err.message}`);
    }
  }
  for await (const message of reader.readMessages()) {
    const channel = reader.channelsById.get(message.channelId);
    const entry = topics[channel.topic];
    const messageReader = readers.get(message.channelId);
    if (!messageReader) continue;
    try {
      entry.messages.push(plain(messageReader.readMessage(message.data)));
      entry.count += 1;
    } catch (err) {
      entry.errors.push(`message ${entry.count}: ${err.message}`);
    }
  }
  await handle.close();
  process.stdout.write(JSON.stringify({ topics }));
}

main(process.argv[2]).catch((err) => {
  process.stderr.write(`decode_bag: ${err.stack ?? err}\n`);
  process.exit(1);
});
