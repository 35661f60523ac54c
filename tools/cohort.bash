# SPDX-License-Identifier: BSD-3-Clause
# bash completion for cohortrun, cohort-info and cohort-bench. Installed once per tool name in
# $(datadir)/bash-completion/completions (bash-completion loads it when the tool is first
# completed). tests/mp/test_install.sh checks that every option a tool's --help shows is here.

_cohort_words() {   # the words of $1 that start with the current word
    local IFS=$' \t\n'
    COMPREPLY=($(compgen -W "$1" -- "${COMP_WORDS[COMP_CWORD]}"))
}

_cohort_files() { COMPREPLY=($(compgen -f -- "${COMP_WORDS[COMP_CWORD]}")); }

_cohort_ifaces() { _cohort_words "$(ls /sys/class/net 2>/dev/null)"; }

_cohortrun() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]} i
    # after the command, complete as for the command itself
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
        -np | -n | --np | -H | --host | --hostfile | --map-by | --network-interface | -x | \
            --rsh | --timeout) ((i++)) ;;
        --) ((i++)); break ;;
        -*) ;;
        *) break ;;
        esac
    done
    if ((i < COMP_CWORD)); then
        if declare -F _command_offset >/dev/null; then _command_offset "$i"; else _cohort_files; fi
        return
    fi
    case $prev in
    --hostfile) _cohort_files; return ;;
    --map-by) _cohort_words "slot node"; return ;;
    --network-interface) _cohort_ifaces; return ;;
    -x) COMPREPLY=($(compgen -e -- "$cur")); return ;;
    -np | -n | --np | -H | --host | --rsh | --timeout) return ;;
    esac
    if [[ $cur == -* ]]; then
        _cohort_words "-np -n --np -H --host --hostfile --oversubscribe --map-by
            --network-interface -x --rsh --tag-output --timeout -v --verbose -h --help --version"
    else
        COMPREPLY=($(compgen -c -- "$cur"))
    fi
}

_cohort_info() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    case $prev in
    --topo-file) _cohort_files; return ;;
    --map-by) _cohort_words "slot node"; return ;;
    --nodes | --ranks-per-node) return ;;
    esac
    _cohort_words "--plugins --settings --interfaces --all --topology --topo-file --nodes
        --ranks-per-node --map-by --peers --job -h --help --version"
}

_cohort_bench() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    case $prev in
    -c | --coll) _cohort_words "allreduce broadcast reduce allgather reduce_scatter alltoall
        barrier"; return ;;
    -d | --datatype) _cohort_words "int8 uint8 int32 uint32 int64 uint64 float16 bfloat16
        float32 float64 all"; return ;;
    -o | --op) _cohort_words "sum prod min max avg all"; return ;;
    --transport) _cohort_words "shm tcp ucx verbs"; return ;;
    --mem) _cohort_words "malloc cohort"; return ;;
    --check | -z | --blocking) _cohort_words "0 1"; return ;;
    -a | --average) _cohort_words "0 1 2 3"; return ;;
    --json | --csv | --svg) _cohort_files; return ;;
    -b | --minbytes | -e | --maxbytes | -f | --stepfactor | -i | --stepbytes | -r | --root | \
        -n | --iters | -w | --warmup_iters | --algo | --result-label | --from | --labels | \
        --title | --nonblocking | --group | --parts) return ;;
    esac
    _cohort_words "-c --coll -b --minbytes -e --maxbytes -f --stepfactor -i --stepbytes
        -d --datatype -o --op -r --root -n --iters -w --warmup_iters --check -z --blocking
        -a --average --transport --algo --json --csv --result-label --same-buffer --mem --touch
        --fresh --svg --from --labels --title --ylog --nonblocking --group --parts --overlap
        -h --help --version"
}

complete -F _cohortrun cohortrun
complete -F _cohort_info cohort-info
complete -F _cohort_bench cohort-bench
