use super::*;
use pretty_assertions::assert_eq;

fn text(t: &str) -> String {
    prepare(t).text.into_owned()
}

#[test]
fn no_dot_namespaces_are_rewritten_to_the_root() {
    assert_eq!(text("{{inputs.x}}"), "{{$.inputs.x}}");
    assert_eq!(
        text("a {{ states.s.Output }} b"),
        "a {{ $.states.s.Output }} b"
    );
    assert_eq!(text("{{(loop).parent}}"), "{{($.loop).parent}}");
    assert_eq!(
        text("{{ if eq inputs.a \"x\" }}{{ escape env.HOME }}{{ end }}"),
        "{{ if eq $.inputs.a \"x\" }}{{ escape $.env.HOME }}{{ end }}"
    );
    assert_eq!(text("{{ inputs.x | escape }}"), "{{ $.inputs.x | escape }}");
}

#[test]
fn dotted_fields_variables_strings_and_comments_are_left_alone() {
    for t in [
        "{{.inputs.x}}",
        "{{$.inputs.x}}",
        "{{$inputs}}",
        "{{.states.inputs}}",
        "{{\"inputs.x\"}}",
        "{{`states`}}",
        "{{/* inputs.x */}}",
        "{{ printf \"%s }} inputs\" .inputs.x }}",
        "inputs.x outside {{.inputs.x}}",
        "{{ 1.5e+3 }}",
    ] {
        assert_eq!(text(t), t, "{t}");
    }
}

#[test]
fn needs_follow_the_mentioned_namespaces_and_states() {
    let n = prepare("{{.inputs.a}} {{states.build.Output}} {{ .states.test.ExitCode }}").needs;
    assert!(n.inputs);
    assert_eq!(
        n.states,
        StatesNeed::Named(vec!["build".to_owned(), "test".to_owned()])
    );
    assert!(!n.env && !n.workflow && !n.loop_frame && !n.root && !n.side_data);

    assert_eq!(
        prepare("{{range .states}}{{end}}").needs.states,
        StatesNeed::All
    );
    assert_eq!(
        prepare("{{index .states \"x\"}}").needs.states,
        StatesNeed::All
    );
    assert!(prepare("{{json .loop.Item}}").needs.side_data);
    assert!(prepare("{{readFile \"a\"}}").needs.side_data);
    assert!(prepare("{{ \"x\" }}").needs.is_empty());
}

#[test]
fn a_bare_dot_or_dollar_means_everything() {
    assert_eq!(prepare("{{.}}").needs, Needs::everything());
    assert_eq!(prepare("{{ $ }}").needs, Needs::everything());
    assert_eq!(
        prepare("{{ index . \"inputs\" }}").needs,
        Needs::everything()
    );
    assert!(!prepare("{{ (index .states.a.JSON 1).a }}").needs.root);
}

#[test]
fn expression_helpers_find_rooted_members() {
    assert_eq!(
        states_in_expression("states.a.Output == 'x' && states.b.ExitCode == 0"),
        StatesNeed::Named(vec!["a".to_owned(), "b".to_owned()])
    );
    assert_eq!(states_in_expression("len(states) > 0"), StatesNeed::All);
    assert_eq!(
        states_in_expression("'states' == inputs.x"),
        StatesNeed::None
    );
    assert_eq!(
        rooted_members("inputs.x == 'states.y' || env.HOME != ''"),
        vec![(Namespace::Inputs, "x"), (Namespace::Env, "HOME")]
    );
    assert!(mentions("loop.Index >= 2", "loop"));
    assert!(!mentions("'loop' == 'x'", "loop"));
}

#[test]
fn columns_map_back_to_the_original_text() {
    let p = prepare("{{inputs.a}} {{ bad }}\n{{ states.x }}{{ nope }}");
    assert_eq!(
        p.text,
        "{{$.inputs.a}} {{ bad }}\n{{ $.states.x }}{{ nope }}"
    );
    assert_eq!(p.inserted, vec![2, 28]);
    // `bad` is at column 19 of the rewritten first line, 17 of the original.
    assert_eq!(p.original_col(1, 19), 17);
    assert_eq!(p.original_col(1, 1), 1);
    // `nope` on line 2: column 20 rewritten, 18 original.
    assert_eq!(p.original_col(2, 20), 18);
    assert_eq!(p.original_col(2, 4), 4);
}
