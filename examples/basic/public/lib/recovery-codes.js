import { h, section } from './ui.js';

/**
 * Shows a fresh batch of recovery codes at the top of the page, once. Any list shown before is
 * removed first: after a regeneration the old codes no longer work, so they must not stay on
 * screen for someone to save.
 */
export function showRecoveryCodes(codes, { lost = 'your second factor' } = {}) {
  for (const old of document.querySelectorAll('[data-recovery-codes]')) old.remove();
  const content = document.querySelector('#main > div');
  const shown = section(
    'Your recovery codes',
    h('p', {}, `Each code signs you in once if you lose ${lost}. Save them now: they are not shown again, and any codes you had before no longer work.`),
    h('ol', { class: 'codes', 'aria-label': 'Recovery codes' }, codes.map((code) => h('li', {}, code))),
  );
  shown.dataset.recoveryCodes = 'true';
  content.prepend(shown);
  return shown;
}
