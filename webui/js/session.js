// Who is signed in, for every page: app.js sets it after sign-in, pages
// ask can(role).  Its own module so pages need not import the shell
// (app.js imports the pages: importing it back made a cycle).
export const session = { me: null };

export function can(role) {
  const rank = { viewer: 1, operator: 2, admin: 3 };
  return session.me !== null && rank[session.me.user.role] >= rank[role];
}
