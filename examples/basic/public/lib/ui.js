// Tiny DOM helpers: enough to keep each page readable without a framework.

/** h('p', {class: 'x'}, 'text', child): an element with attributes (on* become listeners) and children. */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) element.addEventListener(name.slice(2).toLowerCase(), value);
    else if (value === true) element.setAttribute(name, '');
    else element.setAttribute(name, String(value));
  }
  element.append(...children.flat().filter((child) => child !== undefined && child !== null && child !== false));
  return element;
}

let uniqueId = 0;
const nextId = (name) => `f${++uniqueId}-${name}`;

/** A labelled input; `hint` goes under the label. */
export function field({ name, label, type = 'text', value, hint, required = true, autocomplete, inputmode, options, pattern }) {
  const id = nextId(name);
  const control = options
    ? h('select', { id, name, required }, ...options.map((option) => h('option', { value: option.value, selected: option.value === value }, option.label)))
    : h('input', { id, name, type, value, required, autocomplete, inputmode, pattern });
  if (hint) control.setAttribute('aria-describedby', `${id}-hint`);
  return h('div', { class: 'field' }, h('label', { for: id }, label), hint ? h('span', { class: 'hint', id: `${id}-hint` }, hint) : null, control);
}

/**
 * A form whose submit runs `onSubmit(values)`; an error lands in the form's alert line, a
 * string answer in its status line.
 */
export function form({ fields = [], submit, onSubmit, extra = [], name }) {
  const status = h('p', { role: 'status' });
  const alert = h('p', { role: 'alert', class: 'error' });
  const button = h('button', { type: 'submit' }, submit);
  const element = h('form', { 'aria-label': name }, ...fields, ...extra, button, status, alert);
  element.addEventListener('submit', async (event) => {
    event.preventDefault();
    alert.textContent = '';
    status.textContent = '';
    button.disabled = true;
    try {
      const values = Object.fromEntries(new FormData(element));
      const answer = await onSubmit(values, element);
      if (typeof answer === 'string') status.textContent = answer;
    } catch (error) {
      alert.textContent = describeError(error);
    } finally {
      button.disabled = false;
    }
  });
  return element;
}

/** A button whose click runs an async action; failures go to `onError`, or an alert next to it. */
export function actionButton(label, action, { className, ariaLabel } = {}) {
  const button = h('button', { type: 'button', class: className, 'aria-label': ariaLabel }, label);
  button.addEventListener('click', async () => {
    button.disabled = true;
    try {
      await action();
    } catch (error) {
      showError(button.closest('section, main'), error);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/** Puts an error message at the top of a section, in an alert region. */
export function showError(container, error) {
  let alert = container.querySelector(':scope > .section-alert');
  if (!alert) {
    alert = h('p', { role: 'alert', class: 'error section-alert' });
    container.prepend(alert);
  }
  alert.textContent = describeError(error);
}

/** "in 54 minutes": when a 429 may be retried, from the body's `retry_after` (seconds). */
export function retryWhen(seconds) {
  if (!Number.isFinite(seconds) || seconds <= 0) return 'in a moment';
  if (seconds < 60) return `in ${Math.ceil(seconds)} second${Math.ceil(seconds) === 1 ? '' : 's'}`;
  const minutes = Math.ceil(seconds / 60);
  if (minutes < 60) return `in ${minutes} minute${minutes === 1 ? '' : 's'}`;
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return `in ${hours} hour${hours === 1 ? '' : 's'}${rest ? ` ${rest} minute${rest === 1 ? '' : 's'}` : ''}`;
}

/** The text for a failure; every 429 says when to come back, not only "later". */
export function describeError(error) {
  if (error?.errors) return error.errors.join(' ');
  const message = error?.message ?? String(error);
  if (error?.status === 429) return `${message.replace(/;? ?try again later\.?$/i, '.')} Try again ${retryWhen(Number(error.body?.retry_after))}.`;
  return message;
}

export const section = (title, ...children) => {
  const id = nextId('section');
  return h('section', { class: 'card', 'aria-labelledby': id }, h('h2', { id }, title), ...children);
};

export const formatTime = (iso) => (iso ? `${new Date(iso).toLocaleString('en-GB', { timeZone: 'UTC' })} UTC` : '—');

/**
 * "Chrome on Linux" instead of a user-agent string. Rough on purpose: it names the session for
 * a person, it decides nothing. Order matters: Edge and Opera say "Chrome", Chrome says "Safari".
 */
export function describeDevice(userAgent) {
  if (!userAgent) return 'Unknown device';
  const browsers = [[/Edg\//, 'Edge'], [/OPR\//, 'Opera'], [/Firefox\//, 'Firefox'], [/(Headless)?Chrome\/|CriOS\//, 'Chrome'], [/Safari\//, 'Safari'], [/curl\//, 'curl']];
  const systems = [[/Windows/, 'Windows'], [/Android/, 'Android'], [/iPhone|iPad|iPod/, 'iOS'], [/Mac OS X|Macintosh/, 'macOS'], [/CrOS/, 'ChromeOS'], [/Linux/, 'Linux']];
  const browser = browsers.find(([pattern]) => pattern.test(userAgent))?.[1] ?? 'Unknown browser';
  const system = systems.find(([pattern]) => pattern.test(userAgent))?.[1];
  return system ? `${browser} on ${system}` : browser;
}
