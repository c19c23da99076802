/* The session page's live transcript: the session's event stream (the admin's own SSE URL,
   authenticated by the admin session: no API token) appends each retained event as a row, and
   renders the message in progress from its deltas (README, "Reconnecting mid-reply"). A pending
   approval that arrives gets its decision form. Text goes in with textContent only. */
(function () {
  "use strict";
  var RETRY_MS = 2000; // wait before reopening a stream that failed
  var section, list, live, lastId, source;

  function json(value) { return value === undefined || value === null ? "" : JSON.stringify(value); }
  function str(value) { return typeof value === "string" ? value : json(value); }
  function join(pairs) {
    return pairs.filter(function (p) { return p[1]; }).map(function (p) { return p[0] + " " + p[1]; }).join(" · ");
  }

  function present(type, data) { // [role, label, text, details, isError], as sessions_app.transcript
    if (type === "user.message") return ["user", "User", str(data.text), join([["key", data.key]]), false];
    if (type === "assistant.message") return ["assistant", "Assistant", str(data.text), join([["stop reason", data.stop_reason]]), false];
    if (type === "tool.call") return ["tool-call", "Tool call", str(data.name) + "(" + json(data.arguments) + ")", join([["call", data.id]]), false];
    if (type === "tool.result") {
      var result = data.result || {}, parts = [];
      (Array.isArray(result.content) ? result.content : []).forEach(function (item) {
        parts.push(item && item.type === "text" ? str(item.text) : json(item));
      });
      return ["tool-result", "Tool result", parts.join("\n"), join([["call", data.call_id], ["outcome", data.outcome]]), result.is_error === true];
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

  function onEvent(message) {
    var event;
    try { event = JSON.parse(message.data); } catch (error) { return; }
    var type = String(event.type || ""), data = event.data && typeof event.data === "object" ? event.data : {};
    if (type === "assistant.delta") { onDelta(data); return; }
    if (message.lastEventId) lastId = message.lastEventId;
    if (type === "assistant.message") endLive();
    append(row(type, event.time, present(type, data)));
    if (type === "session.status") {
      document.getElementById("session-live-status").textContent = str(data.status);
      if (data.status !== "running") endLive();
    }
    if (type === "approval.requested") approvalForm(data);
    if (type === "approval.decided") {
      var form = document.querySelector('#session-approvals [data-approval="' + data.approval_id + '"]');
      if (form) form.remove();
    }
  }

  var TYPES = ["user.message", "assistant.message", "assistant.delta", "tool.call", "tool.result",
    "approval.requested", "approval.decided", "session.status", "session.error", "model.request"];

  function open() {
    var url = section.getAttribute("data-stream") + (lastId ? "?after=" + encodeURIComponent(lastId) : "");
    source = new EventSource(url, { withCredentials: true });
    TYPES.forEach(function (type) { source.addEventListener(type, onEvent); });
    source.onmessage = onEvent;
    source.onerror = function () { // reopen after the newest event seen: nothing twice, nothing lost
      source.close();
      endLive();
      window.setTimeout(open, RETRY_MS);
    };
    section.setAttribute("data-live", "open");
  }

  document.addEventListener("DOMContentLoaded", function () {
    section = document.getElementById("transcript");
    if (!section || !section.hasAttribute("data-stream") || !window.EventSource) return;
    list = section.querySelector(".transcript-entries");
    lastId = section.getAttribute("data-after") || "";
    open();
  });
})();
