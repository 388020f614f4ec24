/** Injection token of the dashboard's validated options. */
export const QUEUEBOX_DASHBOARD_OPTIONS = 'QUEUEBOX:DASHBOARD_OPTIONS';
/** Injection token of the dashboard's action check (the CSRF token and origin rules). */
export const QUEUEBOX_DASHBOARD_ACTION_CHECK = 'QUEUEBOX:DASHBOARD_ACTION_CHECK';
/** Injection token of the built page files, read at start-up. */
export const QUEUEBOX_DASHBOARD_ASSETS = 'QUEUEBOX:DASHBOARD_ASSETS';
