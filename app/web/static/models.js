// The model picker: the models this key may pick (GET /api/models), one choice per thread.
// A thread shows the model its last turn used (the thread list's `model`, else the default);
// a turn sends the picked model, which the gateway keeps as the thread's.

import { callApi } from "./api.js";

export function modelPicker(select, onPick) {
  let fallback = null;
  /** The pick made with no thread open: the next new thread's. */
  let forNewThread = null;
  select.addEventListener("change", () => {
    if (!onPick(select.value)) forNewThread = select.value;
  });

  /** The models, once: hidden when there is nothing to pick between. */
  async function load() {
    let body;
    try {
      body = await callApi("GET", "/api/models");
    } catch {
      select.hidden = true;  // an older gateway, or no key yet: turns use the default
      return;
    }
    fallback = body.default;
    select.replaceChildren(...body.models.map(({ name }) => new Option(name, name)));
    select.value = fallback;
    select.hidden = body.models.length < 2;
  }

  /** Show a thread's model (none open: the pick for a new thread, else the default). */
  function show(thread) {
    const wanted = (thread ? thread.model : forNewThread) || fallback;
    if ([...select.options].some((option) => option.value === wanted)) select.value = wanted;
  }

  /** What a turn sends: the picked model, or nothing when there is no choice. */
  function picked() {
    return select.hidden || !select.value ? undefined : select.value;
  }

  /** A new thread takes the pick made with no thread open (else the default: null); the
   *  one after starts from the default again. */
  function takeForNewThread() {
    const name = forNewThread;
    forNewThread = null;
    return name;
  }

  return { load, show, picked, takeForNewThread };
}
