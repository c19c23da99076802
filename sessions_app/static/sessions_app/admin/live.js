/* The session page's live transcript: the session's event stream (the admin's own SSE URL,
   authenticated by the admin session: no API token) appends each retained event as a row, and
   renders the message in progress from its deltas (README, "Reconnecting mid-reply") and a tool
   call's latest progress. A pending approval that arrives gets its decision form. The stream is
   read with fetch, not EventSource: EventSource drops a frame whose `event:` name has no listener,
   and every frame is named, so a type the page does not know yet would never show. Here every
   frame is a row (an unknown type as its JSON). Text goes in with textContent only. */
(function () {
  "use strict";
  var RETRY_MS = 2000; // wait before reopening a stream that failed
  var CONFIGURATION_ORDER = ["model", "reasoning_effort", "tools", "instructions"]; // as sessions_app.transcript
  var section, list, live, lastId, closed = false;
  var progress = {}; // call id → the row showing the call's latest tool.progress

  function json(value) { return value === undefined || value === null ? "" : JSON.stringify(value); }
  function str(value) { return typeof value === "string" ? value : json(value); }
  function join(pairs) {
    return pairs.filter(function (p) { return p[1]; }).map(function (p) { return p[0] + " " + p[1]; }).join(" · ");
  }

  function setting(name, value) {
    if (name === "instructions") return json(value);
    if (Array.isArray(value)) return value.length ? value.map(str).join(", ") : "none";
    return str(value);
  }

  function configuration(fields) { // the fields a session.configure changed
    var names = CONFIGURATION_ORDER.filter(function (name) { return name in fields; });
    names = names.concat(Object.keys(fields).filter(function (name) { return CONFIGURATION_ORDER.indexOf(name) < 0; }).sort());
    return names.map(function (name) { return name.replace(/_/g, " ") + " → " + setting(name, fields[name]); }).join(" · ");
  }

  function present(type, data) { // [role, label, text, details, isError], as sessions_app.transcript
    if (type === "user.message") {
      return ["user", data.delivery === "steer" ? "User (steer)" : "User", str(data.text), join([["key", data.key]]), false];
    }
    if (type === "assistant.message") return ["assistant", "Assistant", str(data.text), join([["stop reason", data.stop_reason]]), false];
    if (type === "tool.call") return ["tool-call", "Tool call", str(data.name) + "(" + json(data.arguments) + ")", join([["call", data.id]]), false];
    if (type === "tool.result") {
      var result = data.result || {}, parts = [];
      (Array.isArray(result.content) ? result.content : []).forEach(function (item) {
        parts.push(item && item.type === "text" ? str(item.text) : json(item));
      });
      return ["tool-result", "Tool result", parts.join("\n"), join([["call", data.call_id], ["outcome", data.outcome]]), result.is_error === true];
    }
    if (type === "tool.event") {
      return ["tool-event", "Tool event", str(data.kind) + ": " + str(data.data),
        join([["call", data.call_id], ["environment", data.environment]]), false];
    }
    if (type === "tool.progress") return ["tool-event", "Tool progress", str(data.data), join([["call", data.call_id]]), false];
    if (type === "session.configure") {
      var fields = Object.assign({}, data);
      delete fields.key; // its idempotency key, shown as a detail as a message's is
      return ["config", "Configuration changed", configuration(fields), join([["key", data.key]]), false];
    }
    if (type === "approval.requested") {
      return ["approval", "Approval requested", str(data.tool) + "(" + json(data.arguments) + ")",
        join([["approval", data.approval_id], ["call", data.call_id], ["expires", data.expires_at]]), false];
    }
    if (type === "approval.decided") {
      return ["approval", "Approval decided", str(data.tool) + ": " + str(data.decision) + " by " + (str(data.decided_by) || "nobody"),
        join([["why", data.reason], ["approval", data.approval_id], ["call", data.call_id]]), data.decision !== "approved"];
    }
    if (type === "model.request") {
      var usage = data.usage && typeof data.usage === "object" ? data.usage : {};
      var tokens = Object.keys(usage).filter(function (k) { return /_tokens$/.test(k); }).map(function (k) { return [k.replace(/_/g, " "), usage[k]]; });
      return ["other", "Model request", str(data.model) + " " + str(data.state),
        join([["purpose", data.purpose], ["attempts", data.attempts]].concat(tokens)), data.state === "failed"];
    }
    if (type === "session.status") return ["status", "Status", str(data.status), "", false];
    if (type === "session.error") return ["error", "Error", str(data.message), join([["code", data.code]]), true];
    return ["other", type || "event", json(data), "", false];
  }

  function element(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function row(type, time, shown) {
    var item = element("li", "transcript-entry entry-" + shown[0] + (shown[4] ? " entry-error" : ""));
    item.setAttribute("data-type", type);
    var meta = element("div", "entry-meta");
    meta.appendChild(element("span", "entry-label", shown[1]));
    if (shown[0] === "status") meta.appendChild(element("span", "entry-status-value", shown[2]));
    var stamp = element("time", "", time || "");
    stamp.setAttribute("datetime", time || "");
    meta.appendChild(stamp);
    item.appendChild(meta);
    if (shown[2] && shown[0] !== "status") item.appendChild(element("div", "entry-text", shown[2]));
    if (shown[3]) item.appendChild(element("div", "entry-details", shown[3]));
    return item;
  }

  function append(node) {
    var empty = section.querySelector(".transcript-empty");
    if (empty) empty.remove();
    if (live && live.item.parentNode) list.insertBefore(node, live.item); else list.appendChild(node);
  }

  function onDelta(data) {
    var text = typeof data.text === "string" ? data.text : "";
    var offset = typeof data.offset === "number" ? data.offset : null;
    if (!live) {
      live = { have: "", item: row("assistant.delta", "", ["assistant", "Assistant (writing)", "", "", false]) };
      live.item.classList.add("entry-live");
      live.text = live.item.appendChild(element("div", "entry-text", ""));
      list.appendChild(live.item);
    }
    var have = Array.from(live.have).length; // offsets count code points
    if (offset === null) live.have += text;
    else if (offset <= have) live.have += Array.from(text).slice(have - offset).join("");
    live.text.textContent = live.have;
  }

  function endLive() {
    if (live) { live.item.remove(); live = null; }
  }

  function approvalForm(data) {
    var template = document.getElementById("approval-form-template");
    var holder = document.getElementById("session-approvals");
    if (!template || !holder || holder.querySelector('[data-approval="' + data.approval_id + '"]')) return;
    var form = template.content.firstElementChild.cloneNode(true);
    form.setAttribute("data-approval", data.approval_id);
    form.action = form.getAttribute("action").replace("APPROVAL_ID", encodeURIComponent(data.approval_id));
    form.querySelector(".approval-tool").textContent = str(data.tool);
    form.querySelector(".approval-arguments").textContent = json(data.arguments);
    form.querySelector(".approval-expires").textContent = "expires " + str(data.expires_at);
    holder.appendChild(form);
  }

  function onProgress(item, callId) { // one row a call, updated in place until its result
    var previous = progress[callId];
    item.classList.add("entry-live");
    if (previous && previous.parentNode) previous.parentNode.replaceChild(item, previous); else append(item);
    progress[callId] = item;
  }

  function onEvent(frame) {
    var event;
    try { event = JSON.parse(frame.data); } catch (error) { return; }
    if (!event || typeof event !== "object") return;
    var type = String(event.type || frame.name || ""), data = event.data && typeof event.data === "object" ? event.data : {};
    if (type === "assistant.delta") { onDelta(data); return; }
    if (frame.id) lastId = frame.id;
    if (type === "assistant.message") endLive();
    var item = row(type, event.time, present(type, data));
    if (type === "tool.progress") { onProgress(item, str(data.call_id)); return; }
    append(item);
    if (type === "tool.result" && progress[str(data.call_id)]) {
      progress[str(data.call_id)].remove();
      delete progress[str(data.call_id)];
    }
    if (type === "session.status") {
      document.getElementById("session-live-status").textContent = str(data.status);
      if (data.status !== "running") endLive();
      if (data.status === "closed") closed = true; // final: the stream ends and is not reopened
    }
    if (type === "approval.requested") approvalForm(data);
    if (type === "approval.decided") {
      var form = document.querySelector('#session-approvals [data-approval="' + data.approval_id + '"]');
      if (form) form.remove();
    }
  }

  function onLine(frame, line) { // text/event-stream's fields (WHATWG HTML, "Interpreting an event stream")
    if (line.charAt(line.length - 1) === "\r") line = line.slice(0, -1);
    if (line === "") {
      if (frame.data.length) onEvent({ name: frame.name, data: frame.data.join("\n"), id: frame.id });
      frame.name = ""; frame.data = []; frame.id = "";
      return;
    }
    if (line.charAt(0) === ":") return; // a keepalive
    var colon = line.indexOf(":");
    var field = colon < 0 ? line : line.slice(0, colon), value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.charAt(0) === " ") value = value.slice(1);
    if (field === "data") frame.data.push(value);
    else if (field === "event") frame.name = value;
    else if (field === "id" && value.indexOf("\u0000") < 0) frame.id = value;
  }

  function read(reader) {
    var decoder = new TextDecoder(), buffer = "", frame = { name: "", data: [], id: "" };
    function next() {
      return reader.read().then(function (chunk) {
        if (chunk.done) return;
        buffer += decoder.decode(chunk.value, { stream: true });
        var lines = buffer.split("\n");
        buffer = lines.pop();
        lines.forEach(function (line) { onLine(frame, line); });
        return next();
      });
    }
    return next();
  }

  function open() {
    var url = section.getAttribute("data-stream") + (lastId ? "?after=" + encodeURIComponent(lastId) : "");
    var headers = { Accept: "text/event-stream" };
    fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers }).then(function (response) {
      if (!response.ok || !response.body) throw new Error("the stream answered " + response.status);
      section.setAttribute("data-live", "open");
      return read(response.body.getReader());
    }).catch(function () { return null; }).then(function () {
      // ended or failed: reopen after the newest event seen (nothing twice, nothing lost)
      endLive();
      section.setAttribute("data-live", closed ? "closed" : "waiting");
      if (!closed) window.setTimeout(open, RETRY_MS);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    section = document.getElementById("transcript");
    if (!section || !section.hasAttribute("data-stream") || !window.fetch || !window.TextDecoder) return;
    list = section.querySelector(".transcript-entries");
    lastId = section.getAttribute("data-after") || "";
    var status = document.getElementById("session-live-status");
    closed = Boolean(status) && status.textContent === "closed"; // nothing follows a close
    if (closed) section.setAttribute("data-live", "closed"); else open();
  });
})();
