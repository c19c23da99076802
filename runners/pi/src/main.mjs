// `node runners/pi/src/main.mjs`: serve RunnerFrames on stdin/stdout until stdin closes.
// stdout carries frames only; diagnostics go to stderr.

import { installFetchCounter } from "./metering.mjs";

// Pi's packages need Node 20.6 or later.
const MINIMUM_NODE = [20, 6];

const [major, minor] = process.versions.node.split(".").map(Number);
if (major < MINIMUM_NODE[0] || (major === MINIMUM_NODE[0] && minor < MINIMUM_NODE[1])) {
  process.stderr.write(`pi: Node ${MINIMUM_NODE.join(".")} or later is needed; this is ${process.versions.node}\n`);
  process.exit(1);
}

installFetchCounter();
const { installBedrock } = await import("./bedrock.mjs");
installBedrock();
const { registerPiMessages } = await import("./pimessages.mjs");
registerPiMessages();
const { Host } = await import("./host.mjs");
const status = await new Host(process.stdout).serve(process.stdin);
// a paused stdin still holds the event loop open after broken framing; stdout to a pipe is
// written synchronously, so every frame is out by now
process.exit(status);
