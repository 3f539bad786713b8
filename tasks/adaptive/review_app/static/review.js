// lingtest review: posts each action as JSON, then swaps in the page the server renders again.
"use strict";

const topic = () => document.getElementById("app").dataset.topic;
const DEBOUNCE_MS = 250;

function say(text, error) {
  const msg = document.getElementById("msg");
  msg.textContent = text;
  msg.classList.toggle("error", !!error);
}

async function post(url, body) {
  const response = await fetch(url, {method: "POST", headers: {"content-type": "application/json"},
                                     body: JSON.stringify(body || {})});
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    say(data.error || (data.detail ? JSON.stringify(data.detail) : response.statusText), true);
    throw new Error(data.error || response.statusText);
  }
  return data;
}

// Re-render the page for `path` in place, keeping the filter and the suggestions' scroll.
async function refresh(path) {
  const filter = document.getElementById("filter").value;
  const list = document.getElementById("sug-list");
  const scroll = list ? list.scrollTop : 0;
  const url = "/?topic=" + encodeURIComponent(path);
  const html = await (await fetch(url)).text();
  const fresh = new DOMParser().parseFromString(html, "text/html");
  document.getElementById("app").replaceWith(fresh.getElementById("app"));
  document.title = fresh.title;
  history.replaceState(null, "", url);
  document.getElementById("filter").value = filter;
  applyFilter();
  const again = document.getElementById("sug-list");
  if (again) again.scrollTop = scroll;
  settle();
}

// Text areas as tall as their text (where CSS field-sizing is missing); the last changed
// test row scrolled into view within its pane.
function settle() {
  for (const area of document.querySelectorAll("textarea")) fit(area);
  const recent = document.querySelector("tr.recent");
  if (recent) recent.scrollIntoView({block: "nearest"});
}

function fit(area) {
  if (CSS.supports("field-sizing", "content")) return;
  area.style.height = "auto";
  area.style.height = area.scrollHeight + 2 + "px";
}

// The filter box: suggestions and the topic's tests whose text holds the typed substring.
function applyFilter() {
  const words = document.getElementById("filter").value.toLowerCase().trim();
  for (const item of document.querySelectorAll("#sug-list .sug")) {
    const text = item.querySelector(".sug-text").value.toLowerCase();
    item.hidden = !!words && !text.includes(words);
  }
  for (const row of document.querySelectorAll("tr.test")) {
    const text = row.querySelector("td.input").innerText.toLowerCase();
    row.hidden = !!words && !text.includes(words);
  }
  const count = document.querySelector(".sug-head .count");
  if (count && count.dataset.total) {
    const shown = document.querySelectorAll("#sug-list .sug:not([hidden])").length;
    const of = words ? `${shown} of ${count.dataset.total}` : count.dataset.total;
    count.textContent = `${of} shown · round ${count.dataset.round}`;
  }
}

// Run `request`, re-render the page, and keep a refusal's message on the new page.
async function thenRefresh(request, path) {
  let failure = null;
  try {
    await request;
  } catch (error) {
    failure = error;
  }
  await refresh(path || topic());
  if (failure) {
    say(failure.message, true);
    throw failure;
  }
}

const timers = new WeakMap();
function debounce(element, fn) {
  clearTimeout(timers.get(element));
  timers.set(element, setTimeout(fn, DEBOUNCE_MS));
}

async function preview(input, target) {
  const text = input.value;
  const data = await post("/api/preview", {topic: topic(), text});
  if (input.value !== text) return;  // typed on meanwhile: a newer preview is coming
  target.innerHTML = data.html;
  const first = data.models[0];
  const item = input.closest(".sug");
  if (item && first) item.dataset.score = first.score;
  if (item) item.dataset.previewed = text;
}

const actions = {
  async undo() {
    const data = await post("/api/undo");
    await refresh(topic());
    say("undone: " + data.undone);
  },
  async suggest(button) {
    button.disabled = true;
    button.textContent = "Generating…";
    const pairs = document.getElementById("pairs");
    await thenRefresh(post("/api/suggest", {topic: topic(), pairs: pairs ? pairs.checked : null}));
  },
  async "suggest-topics"(button) {
    button.disabled = true;
    button.textContent = "Thinking of names…";
    await thenRefresh(post("/api/topic/suggest", {topic: topic()}));
    document.querySelector("section.tree").scrollTop = 0;  // the names sit above the tests
  },
  async "create-named-topic"(button) {
    button.disabled = true;
    await post("/api/topic/create", {topic: topic(), name: button.dataset.name});
    await refresh(topic());
  },
  async accept(button) {
    const item = button.closest(".sug");
    item.classList.add("busy");
    await post("/api/accept", {topic: topic(), sid: item.dataset.sid,
                               verdict: button.dataset.verdict,
                               text: item.querySelector(".sug-text").value});
    await refresh(topic());
  },
  async add(button) {
    const input = document.getElementById("new-text");
    await post("/api/add", {topic: topic(), text: input.value, verdict: button.dataset.verdict});
    await refresh(topic());
  },
  async delete(button) {
    await post("/api/delete", {id: button.closest(".test").dataset.id});
    await refresh(topic());
  },
  async "create-topic"() {
    await post("/api/topic/create", {topic: topic(),
                                     name: document.getElementById("new-topic").value});
    await refresh(topic());
  },
  async "rename-topic"() {
    const data = await post("/api/topic/rename", {topic: topic(),
                                                  name: document.getElementById("rename-topic").value});
    await refresh(data.topic);
  },
  async "delete-topic"() {
    const data = await post("/api/topic/delete", {topic: topic()});
    await refresh(data.topic);
  },
};

document.addEventListener("click", event => {
  const button = event.target.closest("[data-action]");
  if (!button || button.disabled) return;
  event.preventDefault();
  actions[button.dataset.action](button).catch(error => console.warn(error));
});

document.addEventListener("change", event => {
  const select = event.target;
  const row = select.closest(".test");
  let done = null;
  if (select.id === "driving") {
    done = post("/api/choose", {model: select.value});
  } else if (select.id === "generator") {
    done = post("/api/choose", {generator: select.value});
  } else if (select.matches("select.expect")) {
    done = post("/api/expect", {id: row.dataset.id, label: select.value});
  } else if (select.matches("select.move") && select.value) {
    done = post("/api/move", {id: row.dataset.id, topic: select.value});
  }
  if (done) thenRefresh(done).catch(error => console.warn(error));
});

document.addEventListener("DOMContentLoaded", settle);

document.addEventListener("input", event => {
  const input = event.target;
  if (input.tagName === "TEXTAREA") fit(input);
  if (input.id === "filter") {
    applyFilter();
  } else if (input.id === "new-text") {
    debounce(input, () => preview(input, document.getElementById("new-preview")));
  } else if (input.matches(".sug-text")) {
    debounce(input, () => preview(input, input.closest(".sug").querySelector(".mcell")));
  }
});

document.addEventListener("keydown", event => {
  if (event.key !== "Enter") return;
  if (event.target.tagName === "TEXTAREA") {  // one line per test: Enter adds no line break
    event.preventDefault();
    return;
  }
  const id = event.target.id;
  const action = {"new-topic": "create-topic", "rename-topic": "rename-topic"}[id];
  if (action) {
    event.preventDefault();
    actions[action]().catch(error => console.warn(error));
  }
});
